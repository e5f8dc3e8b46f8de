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

// TestReceiverServers: both servers count each request once by its
// Idempotency-Key and its body's bytes; a switch closes the other
// server's kept-alive connections and the sender goes on over new ones.
func TestReceiverServers(t *testing.T) {
	r, err := newReceiver()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + r.addr + "/hook"
	body := []byte(strings.Repeat("x", 4000))
	for round, lean := range []bool{false, true, false, true} {
		r.setLean(lean)
		r.reset(nil, nil)
		for i := range 20 {
			post(t, c, url, fmt.Sprintf("%d-%d", round, i), body[:i*200])
		}
		post(t, c, url, fmt.Sprintf("%d-0", round), body[:0]) // a repeated id counts once
		if _, err := r.waitReceived(20, 10*time.Second); err != nil {
			t.Fatalf("round %d (lean %v): %v", round, lean, err)
		}
		if got, want := r.received(), 20; got != want {
			t.Fatalf("round %d (lean %v): %d ids, want %d", round, lean, got, want)
		}
		if got, want := r.meanBody(), int64(19*200/2); got != want {
			t.Fatalf("round %d (lean %v): mean body %d, want %d", round, lean, got, want)
		}
	}
	if open := r.loop.open(); open != 1 {
		t.Errorf("lean server: %d connections open, want the one kept alive", open)
	}
	if err := r.malformed(); err != nil {
		t.Fatal(err)
	}
}

// TestReceiverLeanRefuses: the lean server answers what it does not serve
// 400 and reports it, so that a drain against it fails instead of
// counting short.
func TestReceiverLeanRefuses(t *testing.T) {
	r, err := newReceiver()
	if err != nil {
		t.Fatal(err)
	}
	r.setLean(true)
	req, err := http.NewRequest(http.MethodPost, "http://"+r.addr+"/hook", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("chunked POST: %s, want 400", resp.Status)
	}
	if _, err := r.waitReceived(1, time.Second); err == nil || !strings.Contains(err.Error(), "Transfer-Encoding") {
		t.Errorf("waitReceived: %v, want the Transfer-Encoding error", err)
	}
}
