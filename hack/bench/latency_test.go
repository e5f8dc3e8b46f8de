package main

import (
	"testing"
	"time"
)

func TestSentAt(t *testing.T) {
	at := time.Unix(0, 1764676800123456789)
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"a latency write", `{"changes":[{"op":"replace","path":"/data/counter","value":"1764676800123456789-lat","oldValue":"0"}]}`, true},
		{"no change", `{"changes":[]}`, false},
		{"a number", `{"changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}]}`, false},
		{"not a time", `{"changes":[{"op":"add","path":"/data/x","value":"abc"}]}`, false},
		{"not JSON", `{`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := sentAt([]byte(tt.body))
			if ok != tt.ok || ok && !got.Equal(at) {
				t.Errorf("sentAt = %v, %v; want %v", got, ok, tt.ok)
			}
		})
	}
}
