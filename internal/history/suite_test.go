package history

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// storeSuite runs the behaviour every Store must have against a fresh
// store from open.
func storeSuite(t *testing.T, openStore func(t *testing.T) Store) {
	// Whatever a test did, the store's trail verifies.
	open := func(t *testing.T) Store {
		s := openStore(t)
		t.Cleanup(func() {
			if r := verifyTrail(t, s, VerifyOptions{}); !r.Intact() {
				t.Errorf("the trail does not verify: %+v", r)
			}
		})
		return s
	}
	t.Run("OncePerID", func(t *testing.T) {
		s := open(t)
		a := fixture{uid: "u1", rv: "10", namespace: "shop", name: "w1", time: t0}
		b := fixture{uid: "u1", rv: "11", namespace: "shop", name: "w1", time: t0.Add(time.Second)}
		if n := write(t, s, a.entry(t, Delivered), b.entry(t, Delivered)); n != 2 {
			t.Errorf("first write: %d new, want 2", n)
		}
		// The same ids again, one of them twice in one batch: nothing new.
		if n := write(t, s, b.entry(t, Delivered), a.entry(t, Confirmed), a.entry(t, Delivered)); n != 0 {
			t.Errorf("second write: %d new, want 0", n)
		}
		got := queryAll(t, s, Query{})
		if want := []string{"u1/11/audit", "u1/10/audit"}; !slices.Equal(got, want) {
			t.Errorf("entries %v, want %v (newest first, once each)", got, want)
		}
		st, err := s.Stats(context.Background())
		if err != nil || st.Entries != 2 || st.Bytes <= 0 {
			t.Errorf("Stats = %+v, %v; want 2 entries and some bytes", st, err)
		}
	})

	t.Run("EntryFields", func(t *testing.T) {
		s := open(t)
		f := fixture{uid: "u9", rv: "7", rule: "r", typ: "deleted", group: "", resource: "configmaps", namespace: "ns", name: "cm",
			user: "admin", imp: "alice", manager: "kubectl", time: t0}
		write(t, s, f.entry(t, Confirmed))
		p, err := s.Query(context.Background(), Query{})
		if err != nil || len(p.Entries) != 1 {
			t.Fatalf("Query = %+v, %v", p, err)
		}
		e := p.Entries[0]
		if e.ID != "u9/deleted/r" || e.Type != "deleted" || e.Group != "" || e.Resource != "configmaps" || e.Namespace != "ns" ||
			e.Name != "cm" || e.User != "admin" || e.Impersonated != "alice" || e.Manager != "kubectl" || e.Source != Confirmed ||
			!e.Time.Equal(t0) || e.Seq <= 0 || string(e.Payload) != string(f.payload()) {
			t.Errorf("entry %+v\npayload %s", e, e.Payload)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		s := open(t)
		var all []Entry
		for i := range 40 {
			f := fixture{
				uid: fmt.Sprintf("u%d", i%8), rv: fmt.Sprint(100 + i), rule: []string{"audit", "resize"}[i%2],
				typ: []string{"created", "updated", "deleted"}[i%3], namespace: []string{"shop", "lab"}[i/20],
				name: fmt.Sprintf("w%d", i%8), user: []string{"alice", "bob", ""}[i%3], time: t0.Add(time.Duration(i) * time.Minute),
			}
			if f.typ == "deleted" {
				f.uid = fmt.Sprintf("d%d", i) // an object is deleted once
			}
			if i%5 == 0 {
				f.group, f.resource = "apps", "deployments"
			}
			if i%7 == 0 {
				f.imp = "carol"
			}
			all = append(all, f.entry(t, Delivered))
		}
		write(t, s, all...)
		for _, tc := range []struct {
			name string
			q    Query
			keep func(e Entry) bool
		}{
			{"all", Query{}, func(Entry) bool { return true }},
			{"namespace", Query{Namespace: "lab"}, func(e Entry) bool { return e.Namespace == "lab" }},
			{"uid", Query{UID: "u3"}, func(e Entry) bool { return e.UID == "u3" }},
			{"uid and namespace", Query{UID: "u3", Namespace: "shop"}, func(e Entry) bool { return e.UID == "u3" && e.Namespace == "shop" }},
			{"name", Query{Name: "w5"}, func(e Entry) bool { return e.Name == "w5" }},
			{"resource any group", Query{Resource: "deployments"}, func(e Entry) bool { return e.Resource == "deployments" }},
			{"resource and group", Query{Resource: "widgets", Group: "example.com", GroupSet: true}, func(e Entry) bool { return e.Resource == "widgets" }},
			{"resource of another group", Query{Resource: "widgets", Group: "apps", GroupSet: true}, func(Entry) bool { return false }},
			{"user", Query{User: "alice"}, func(e Entry) bool { return e.User == "alice" }},
			{"impersonated user", Query{User: "carol"}, func(e Entry) bool { return e.Impersonated == "carol" }},
			{"rule", Query{Rule: "resize"}, func(e Entry) bool { return e.Rule == "resize" }},
			{"type", Query{Type: "deleted"}, func(e Entry) bool { return e.Type == "deleted" }},
			{"since", Query{Since: t0.Add(30 * time.Minute)}, func(e Entry) bool { return !e.Time.Before(t0.Add(30 * time.Minute)) }},
			{"until", Query{Until: t0.Add(10 * time.Minute)}, func(e Entry) bool { return e.Time.Before(t0.Add(10 * time.Minute)) }},
			{"range and namespace and type", Query{Since: t0.Add(5 * time.Minute), Until: t0.Add(35 * time.Minute), Namespace: "lab", Type: "updated"},
				func(e Entry) bool {
					return !e.Time.Before(t0.Add(5*time.Minute)) && e.Time.Before(t0.Add(35*time.Minute)) && e.Namespace == "lab" && e.Type == "updated"
				}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var want []string
				for i := len(all) - 1; i >= 0; i-- {
					if tc.keep(all[i]) {
						want = append(want, all[i].ID)
					}
				}
				for _, limit := range []int{0, 1, 3} {
					q := tc.q
					q.Limit = limit
					if got := queryAll(t, s, q); !slices.Equal(got, want) {
						t.Errorf("limit %d: %v, want %v", limit, got, want)
					}
				}
			})
		}
	})

	t.Run("TimeRange", func(t *testing.T) {
		// Times outside the history's range are clamped by ParseQuery
		// alike on every store: the embedded store's key (time x 1024)
		// overflowed past 2255, and since=2300 returned everything.
		s := open(t)
		var all []Entry
		for i := range 3 {
			all = append(all, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Second)}.entry(t, Delivered))
		}
		write(t, s, all...)
		for _, tc := range []struct {
			query string
			want  int
		}{
			{"since=2300-01-01T00:00:00Z", 0},
			{"since=9999-12-31T23:59:59Z", 0},
			{"until=2300-01-01T00:00:00Z", 3},
			{"since=1600-01-01T00:00:00Z", 3},
			{"since=0001-01-01T00:00:00Z&until=9999-01-01T00:00:00Z", 3},
			{"until=1600-01-01T00:00:00Z", 0},
			{"since=2300-01-01T00:00:00Z&until=2400-01-01T00:00:00Z", 0},
			{"since=1000000h", 3},
		} {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := ParseQuery(v, t0)
			if err != nil {
				t.Fatalf("%s: %v", tc.query, err)
			}
			if got := queryAll(t, s, q); len(got) != tc.want {
				t.Errorf("%s: %d entries, want %d", tc.query, len(got), tc.want)
			}
		}
		// A query built without ParseQuery is held to the range too.
		if got := queryAll(t, s, Query{Since: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}); len(got) != 0 {
			t.Errorf("Query{Since: 2300}: %d entries, want none", len(got))
		}
	})

	t.Run("ScanWindow", func(t *testing.T) {
		s := open(t)
		defer func(w int) { scanWindow = w }(scanWindow)
		scanWindow = 5
		var all []Entry
		for i := range 30 {
			f := fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "shop", name: "w", time: t0.Add(time.Duration(i) * time.Second)}
			if i == 2 || i == 27 {
				f.rule = "rare"
			}
			all = append(all, f.entry(t, Delivered))
		}
		write(t, s, all...)
		// A rare value: pages stop at the window, with a cursor, and the
		// walk still finds every match.
		p, err := s.Query(context.Background(), Query{Rule: "rare", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(p); !slices.Equal(got, []string{"u27/1/rare"}) || p.Next == nil {
			t.Errorf("first page %v (next %v), want u27 and a cursor: the window is 5 entries", got, p.Next)
		}
		if got := queryAll(t, s, Query{Rule: "rare", Limit: 10}); !slices.Equal(got, []string{"u27/1/rare", "u2/1/rare"}) {
			t.Errorf("all pages: %v", got)
		}
	})

	t.Run("Access", func(t *testing.T) {
		// Access is decided on an entry's resource, namespace and name
		// before its payload is read: the entries it refuses are never
		// loaded, and a page holds only those it allows.
		s := open(t)
		var all []Entry
		for i := range 30 {
			f := fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: []string{"shop", "lab", "dev"}[i%3], name: fmt.Sprintf("w%d", i%5),
				time: t0.Add(time.Duration(i) * time.Second)}
			if i%2 == 0 {
				f.group, f.resource = "", "configmaps"
			}
			all = append(all, f.entry(t, Delivered))
		}
		write(t, s, all...)
		widgets, configmaps := GroupResource{"example.com", "widgets"}, GroupResource{"", "configmaps"}
		var checked []Ref
		inShop := func(_ context.Context, r Ref) (bool, error) {
			checked = append(checked, r)
			return r.Namespace == "shop", nil
		}
		for _, tc := range []struct {
			name   string
			q      Query
			keep   func(e Entry) bool
			checks bool // Check is asked
		}{
			{"one resource in full", Query{Access: &Access{Resources: []GroupResource{configmaps}}}, func(e Entry) bool { return e.Resource == "configmaps" }, false},
			{"one resource entry by entry", Query{Access: &Access{Checked: []GroupResource{widgets}, Check: inShop}},
				func(e Entry) bool { return e.Resource == "widgets" && e.Namespace == "shop" }, true},
			{"both", Query{Access: &Access{Resources: []GroupResource{configmaps}, Checked: []GroupResource{widgets}, Check: inShop}},
				func(e Entry) bool { return e.Resource == "configmaps" || e.Namespace == "shop" }, true},
			{"with a namespace", Query{Namespace: "lab", Access: &Access{Checked: []GroupResource{widgets, configmaps}, Check: inShop}}, func(Entry) bool { return false }, true},
			{"with a uid", Query{UID: "u4", Access: &Access{Resources: []GroupResource{configmaps}}}, func(e Entry) bool { return e.UID == "u4" }, false},
			{"a resource with no entries", Query{Access: &Access{Resources: []GroupResource{{"apps", "deployments"}}}}, func(Entry) bool { return false }, false},
			{"nothing", Query{Access: &Access{}}, func(Entry) bool { return false }, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var want []string
				for i := len(all) - 1; i >= 0; i-- {
					if tc.keep(all[i]) {
						want = append(want, all[i].ID)
					}
				}
				for _, limit := range []int{0, 1, 4} {
					checked = nil
					q := tc.q
					q.Limit = limit
					if got := queryAll(t, s, q); !slices.Equal(got, want) {
						t.Errorf("limit %d: %v, want %v", limit, got, want)
					}
					for _, r := range checked {
						if r.GroupResource != widgets && !slices.Contains(tc.q.Access.Checked, r.GroupResource) || r.Name == "" {
							t.Errorf("Check asked about %+v", r)
						}
					}
					if (len(checked) > 0) != tc.checks {
						t.Errorf("limit %d: Check asked %d times", limit, len(checked))
					}
				}
			})
		}
		// ErrStop ends a page before the entry Check was asked about: the
		// next page starts at it, and the walk loses nothing.
		calls := 0
		stopEvery3 := func(_ context.Context, r Ref) (bool, error) {
			calls++
			if calls%3 == 0 {
				return false, fmt.Errorf("enough: %w", ErrStop)
			}
			return true, nil
		}
		var want []string
		for i := len(all) - 1; i >= 0; i-- {
			want = append(want, all[i].ID)
		}
		if got := queryAll(t, s, Query{Access: &Access{Checked: []GroupResource{widgets, configmaps}, Check: stopEvery3}}); !slices.Equal(got, want) {
			t.Errorf("stopped every third check: %v, want %v", got, want)
		}
		boom := errors.New("boom")
		if _, err := s.Query(context.Background(), Query{Access: &Access{Checked: []GroupResource{widgets}, Check: func(context.Context, Ref) (bool, error) { return false, boom }}}); !errors.Is(err, boom) {
			t.Errorf("Check's error: %v", err)
		}
		got, err := s.Resources(context.Background())
		slices.SortFunc(got, func(a, b GroupResource) int { return strings.Compare(a.Group+"/"+a.Resource, b.Group+"/"+b.Resource) })
		if err != nil || !slices.Equal(got, []GroupResource{configmaps, widgets}) {
			t.Errorf("Resources = %v, %v", got, err)
		}
	})

	t.Run("MaxBytes", func(t *testing.T) {
		// A page's payloads stay within MaxBytes; an entry larger on its
		// own comes without its payload, and paging goes on. Reserve is
		// asked for the page's bytes before any payload is read.
		s := open(t)
		var all []Entry
		for i := range 12 {
			size := 100 + 300*(i%4)
			if i == 7 {
				size = 5000
			}
			changes := `[{"op":"replace","path":"/spec/text","value":"` + strings.Repeat("x", size) + `","oldValue":"y"}]`
			all = append(all, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", changes: changes, time: t0.Add(time.Duration(i) * time.Second)}.entry(t, Delivered))
		}
		write(t, s, all...)
		const bound = 2500
		var reserved []int64
		q := Query{MaxBytes: bound, Reserve: func(n int64) bool { reserved = append(reserved, n); return true }}
		var got []string
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("paging does not end")
			}
			p, err := s.Query(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			var bytes int64
			for _, e := range p.Entries {
				got = append(got, e.ID)
				bytes += int64(len(e.Payload))
				switch {
				case e.ID == "u7/1/audit" && (e.Omitted != int64(len(all[7].Payload)) || e.Payload != nil || e.UID != "u7" || e.Namespace != "ns"):
					t.Errorf("the oversized entry: omitted %d, payload %d bytes, %+v", e.Omitted, len(e.Payload), e)
				case e.ID != "u7/1/audit" && (e.Omitted != 0 || len(e.Payload) == 0):
					t.Errorf("%s: omitted %d, payload %d bytes", e.ID, e.Omitted, len(e.Payload))
				}
			}
			if bytes > bound || len(p.Entries) == 0 && p.Next != nil {
				t.Errorf("a page of %d entries, %d bytes (bound %d), next %v", len(p.Entries), bytes, bound, p.Next)
			}
			if bytes > 0 && (len(reserved) == 0 || reserved[len(reserved)-1] != bytes) {
				t.Errorf("reserved %v, the page holds %d bytes", reserved, bytes)
			}
			if p.Next == nil {
				break
			}
			q.After = p.Next
		}
		var want []string
		for i := len(all) - 1; i >= 0; i-- {
			want = append(want, all[i].ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("paged %v, want %v", got, want)
		}
		// A refused reservation reads nothing.
		_, err := s.Query(context.Background(), Query{Reserve: func(int64) bool { return false }})
		if !errors.Is(err, ErrBusy) {
			t.Errorf("a refused reservation: %v, want ErrBusy", err)
		}
	})

	t.Run("ScanWindowIgnoresTheFilter", func(t *testing.T) {
		// The window counts every entry it goes through, matching or
		// not: where a page stops depends on the history, not on which
		// entries match (nor on Access), so a cursor tells nothing of
		// entries a caller may not read.
		s := open(t)
		defer func(w int) { scanWindow = w }(scanWindow)
		scanWindow = 10
		var all []Entry
		for i := range 25 {
			f := fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "w", user: "bob", time: t0.Add(time.Duration(i) * time.Second)}
			if i < 15 {
				f.user = "carol"
			}
			all = append(all, f.entry(t, Delivered))
		}
		write(t, s, all...)
		var first *Cursor
		for _, q := range []Query{{User: "carol"}, {User: "nobody"}, {Name: "nonexistent"}, {Access: &Access{Resources: []GroupResource{{"apps", "x"}}}},
			{Namespace: "ns", User: "nobody"}} {
			p, err := s.Query(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if p.Next == nil || p.Scanned != 10 || len(p.Entries) != 0 {
				t.Errorf("%+v: %d entries, next %v, scanned %d; want none, a cursor and 10", q, len(p.Entries), p.Next, p.Scanned)
				continue
			}
			if first == nil {
				first = p.Next
			} else if *p.Next != *first {
				t.Errorf("%+v: next %v, want %v as for the other filters", q, *p.Next, *first)
			}
		}
	})

	t.Run("TrimAge", func(t *testing.T) {
		s := open(t)
		var es []Entry
		for i := range 20 {
			es = append(es, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Hour)}.entry(t, Delivered))
		}
		write(t, s, es...)
		tr, err := s.Trim(context.Background(), t0.Add(5*time.Hour), 0)
		if err != nil || tr.Age != 5 || tr.Size != 0 {
			t.Fatalf("Trim = %+v, %v; want 5 removed by age", tr, err)
		}
		got := queryAll(t, s, Query{})
		if len(got) != 15 || got[len(got)-1] != "u5/1/audit" {
			t.Errorf("after trimming: %d entries, oldest %s; want 15, oldest u5", len(got), got[len(got)-1])
		}
		if st, _ := s.Stats(context.Background()); st.Entries != 15 {
			t.Errorf("Stats.Entries = %d, want 15", st.Entries)
		}
	})

	t.Run("TrimSize", func(t *testing.T) {
		s := open(t)
		ctx := context.Background()
		empty, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		big := `[{"op":"replace","path":"/spec/text","value":"` + string(make([]byte, 0)) + fmt.Sprintf("%0900d", 0) + `","oldValue":"x"}]`
		for b := range 10 {
			var es []Entry
			for i := range 200 {
				n := b*200 + i
				es = append(es, fixture{uid: fmt.Sprintf("u%d", n), rv: "1", namespace: "ns", name: "n", changes: big,
					time: t0.Add(time.Duration(n) * time.Second)}.entry(t, Delivered))
			}
			write(t, s, es...)
		}
		before, err := s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		limit := before.Bytes - (before.Bytes-empty.Bytes)/2
		tr, err := s.Trim(ctx, time.Time{}, limit)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := s.Stats(ctx)
		if tr.Size == 0 || after.Bytes > limit || after.Entries == 0 || after.Entries != before.Entries-int64(tr.Size) {
			t.Errorf("Trim to %d bytes removed %d: %+v -> %+v", limit, tr.Size, before, after)
		}
		got := queryAll(t, s, Query{Limit: 1000})
		if len(got) != int(after.Entries) || len(got) == 0 || got[0] != "u1999/1/audit" {
			t.Errorf("%d entries left, newest %s: want %d, the newest kept", len(got), got[0], after.Entries)
		}
		// Under the bound: nothing more goes.
		if tr, err := s.Trim(ctx, time.Time{}, limit); err != nil || tr.Size != 0 {
			t.Errorf("second Trim = %+v, %v; want nothing removed", tr, err)
		}
	})
}
