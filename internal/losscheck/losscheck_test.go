package losscheck

import (
	"slices"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	at := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	writes := []Write{
		{Type: "created", Name: "a", UID: "u1", ResourceVersion: "10", At: at},
		{Type: "updated", Name: "a", UID: "u1", ResourceVersion: "11", At: at},
		{Type: "updated", Name: "a", UID: "u1", ResourceVersion: "12", At: at},
		{Type: "created", Name: "b", UID: "u2", ResourceVersion: "13", At: at},
		{Type: "deleted", Name: "b", UID: "u2", At: at},
		{Type: "created", Name: "c", UID: "u3", ResourceVersion: "15", At: at},
		{Type: "updated", Name: "c", UID: "u3", ResourceVersion: "16", At: at},
	}
	got := []Delivery{
		{ID: "1", Type: "created", UID: "u1", ResourceVersion: "10"},
		// rv 11 is covered by the later update (a net effect).
		{ID: "2", Type: "updated", UID: "u1", ResourceVersion: "12"},
		{ID: "2", Type: "updated", UID: "u1", ResourceVersion: "12"}, // a repeat with its id
		{ID: "3", Type: "created", UID: "u2", ResourceVersion: "13"},
		{ID: "4", Type: "deleted", UID: "u2", ResourceVersion: "14"},
		{ID: "5", Type: "created", UID: "u3", ResourceVersion: "15"},
		{ID: "6", Type: "created", UID: "u3", ResourceVersion: "15"}, // the same change under another id
	}
	o := Compare(writes, got)
	if o.Writes != 7 || o.Delivered != 7 || o.IDs != 6 || o.Duplicates != 1 {
		t.Errorf("counts: %s", o)
	}
	wantLost := []string{"final state of c rv 16", "updated c rv 16 at 04:00:00.000"}
	if !slices.Equal(o.Lost, wantLost) {
		t.Errorf("lost %q, want %q", o.Lost, wantLost)
	}
	if want := []string{"u3/created/15 under 2 ids"}; !slices.Equal(o.Conflicting, want) {
		t.Errorf("conflicting %q, want %q", o.Conflicting, want)
	}
	if o := Compare(writes[:5], got[:5]); len(o.Lost) != 0 || len(o.Conflicting) != 0 {
		t.Errorf("all covered, got %s: %q %q", o, o.Lost, o.Conflicting)
	}
	// A final state covered only by an update past it is lost: the last
	// state must be delivered exactly.
	if o := Compare(writes[:2], []Delivery{{ID: "1", Type: "created", UID: "u1", ResourceVersion: "10"}, {ID: "2", Type: "updated", UID: "u1", ResourceVersion: "12"}}); !slices.Equal(o.Lost, []string{"final state of a rv 11"}) {
		t.Errorf("lost %q, want the final state of a", o.Lost)
	}
}
