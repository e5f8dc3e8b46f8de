// Package losscheck compares the writes a test made to objects with the
// payloads fieldwatch delivered for them: which writes no payload covers
// (lost), how many payloads repeat an id (duplicates, allowed), and which
// change was delivered under several ids (conflicting, never allowed).
// The failover, rollout and chart tests of cmd/fieldwatch, e2e and
// charts/e2e share it. It imports nothing but the standard library.
package losscheck

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Write is one write a test made.
type Write struct {
	Type            string // created, updated, deleted
	Name            string // as the lost list names the object
	UID             string
	ResourceVersion string // of the new state; "" for a deletion
	At              time.Time
}

// Delivery is one payload fieldwatch delivered.
type Delivery struct {
	ID, Type, UID, ResourceVersion string
}

// Outcome is how the deliveries compare with the writes.
type Outcome struct {
	Writes, Delivered, IDs, Duplicates int
	Lost                               []string // writes no payload covers, sorted
	Conflicting                        []string // one change under several ids
}

func (o Outcome) String() string {
	return fmt.Sprintf("%d changes made, %d payloads delivered, %d distinct ids, %d duplicates (equal ids), %d lost, %d under different ids",
		o.Writes, o.Delivered, o.IDs, o.Duplicates, len(o.Lost), len(o.Conflicting))
}

// Compare checks the deliveries against the writes. A creation and a
// deletion must be reported as such; an update by a payload about the same
// object at or after its resourceVersion, or by the object's deletion; and
// every object's final state by a payload of exactly that
// resourceVersion. Duplicates must carry equal ids: one change (object,
// type, resourceVersion) under two ids is a conflict.
func Compare(writes []Write, got []Delivery) Outcome {
	o := Outcome{Writes: len(writes), Delivered: len(got)}
	byUID := map[string][]Delivery{}
	ids := map[string]bool{}
	idsOf := map[string]map[string]bool{}
	for _, d := range got {
		byUID[d.UID] = append(byUID[d.UID], d)
		ids[d.ID] = true
		k := d.UID + "/" + d.Type + "/" + d.ResourceVersion
		if idsOf[k] == nil {
			idsOf[k] = map[string]bool{}
		}
		idsOf[k][d.ID] = true
	}
	o.IDs = len(ids)
	o.Duplicates = len(got) - len(ids)
	for k, set := range idsOf {
		if len(set) > 1 {
			o.Conflicting = append(o.Conflicting, fmt.Sprintf("%s under %d ids", k, len(set)))
		}
	}
	slices.Sort(o.Conflicting)
	covered := func(w Write) bool {
		for _, d := range byUID[w.UID] {
			switch w.Type {
			case "created", "deleted":
				if d.Type == w.Type {
					return true
				}
			case "updated":
				if d.Type == "deleted" || rvAtLeast(d.ResourceVersion, w.ResourceVersion) {
					return true
				}
			}
		}
		return false
	}
	final := map[string]Write{}
	for _, w := range writes {
		if !covered(w) {
			o.Lost = append(o.Lost, fmt.Sprintf("%s %s rv %s at %s", w.Type, w.Name, w.ResourceVersion, w.At.Format("15:04:05.000")))
		}
		final[w.UID] = w
	}
	for _, w := range final {
		if w.Type == "deleted" {
			continue
		}
		if !slices.ContainsFunc(byUID[w.UID], func(d Delivery) bool { return d.Type != "deleted" && d.ResourceVersion == w.ResourceVersion }) {
			o.Lost = append(o.Lost, fmt.Sprintf("final state of %s rv %s", w.Name, w.ResourceVersion))
		}
	}
	slices.Sort(o.Lost)
	return o
}

// rvAtLeast reports whether resourceVersion a is at or after b (etcd's
// revisions, as the apiserver serves them here).
func rvAtLeast(a, b string) bool {
	x, _ := strconv.ParseUint(a, 10, 64)
	y, _ := strconv.ParseUint(b, 10, 64)
	return x >= y
}
