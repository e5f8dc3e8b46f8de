package payload_test

import (
	"fmt"
	"io"
	"net/http"

	"github.com/fieldwatch/fieldwatch/payload"
)

// A receiver decodes the body fieldwatch's webhook POSTs, and refuses
// what is not a payload.
func ExampleUnmarshal() {
	body := []byte(`{"id":"6a1f/4711/widget-resized","time":"2026-12-02T12:00:00.000000Z","rule":"widget-resized","type":"updated",` +
		`"resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},` +
		`"namespace":"shop","name":"w1","uid":"6a1f","resourceVersion":"4711",` +
		`"changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}],` +
		`"actor":{"manager":"kubectl-patch","operation":"Update"}}`)
	var p payload.Payload
	if err := payload.Unmarshal(body, &p); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Rule, p.Type, p.Resource.Kind, p.Namespace+"/"+p.Name, "by", p.Actor.Manager)
	for _, c := range p.Changes {
		fmt.Println(c.Op, c.Path, string(c.OldValue), "->", string(c.Value))
	}
	fmt.Println(payload.Unmarshal([]byte(`{"id":"x"}`), &p))
	// Output:
	// widget-resized updated Widget shop/w1 by kubectl-patch
	// replace /spec/size 1 -> 3
	// payload: rule: missing or empty
}

// handler is a webhook receiver: 400 for a body that is not a payload.
func handler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p payload.Payload
	if err := payload.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// p.ID is the same on a redelivery: drop duplicates by it.
	_, _ = fmt.Fprintln(w, "ok", p.ID)
}

func Example_receiver() {
	http.HandleFunc("/fieldwatch", handler)
}
