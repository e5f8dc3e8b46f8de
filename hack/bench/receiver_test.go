package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, c *http.Client, url, id string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", id)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", id, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", id, resp.Status)
	}
}

// TestReceiverCounts: the receiver counts each request once by its
// Idempotency-Key, and its body's bytes, whether it reads the body whole
// (inspect) or not.
func TestReceiverCounts(t *testing.T) {
	r, err := newReceiver()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + r.addr + "/hook"
	body := []byte(strings.Repeat("x", 4000))
	for round, inspect := range []bool{false, true} {
		var inspected int
		if inspect {
			r.reset(nil, func([]byte) { inspected++ })
		} else {
			r.reset(nil, nil)
		}
		for i := range 20 {
			post(t, c, url, fmt.Sprintf("%d-%d", round, i), body[:i*200])
		}
		post(t, c, url, fmt.Sprintf("%d-0", round), body[:0]) // a repeated id counts once
		if _, err := r.waitReceived(20, 10*time.Second); err != nil {
			t.Fatalf("round %d (inspect %v): %v", round, inspect, err)
		}
		if got, want := r.received(), 20; got != want {
			t.Fatalf("round %d (inspect %v): %d ids, want %d", round, inspect, got, want)
		}
		if got, want := r.meanBody(), int64(19*200/2); got != want {
			t.Fatalf("round %d (inspect %v): mean body %d, want %d", round, inspect, got, want)
		}
		if inspect && inspected != 21 {
			t.Errorf("inspected %d bodies, want 21", inspected)
		}
	}
}
