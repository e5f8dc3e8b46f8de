package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// apiserverLog is an audit log written by kube-apiserver v1.37.2 (JSON
// format): Metadata level in namespace meta, RequestResponse level in rr,
// creates (one with generateName), update, patches (merge, JSON, apply, a
// no-op), a dry run, delete and deletecollection, impersonating alice.
const apiserverLog = "testdata/apiserver.jsonl"

func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		lines = append(lines, slices.Clone(s.Bytes()))
	}
	return lines
}

// TestDecodeGolden decodes every event of the apiserver's log and compares
// what is kept with testdata/golden/apiserver.records.json.
func TestDecodeGolden(t *testing.T) {
	var b bytes.Buffer
	for i, line := range readLines(t, apiserverLog) {
		rec, keep, err := DecodeEvent(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		out := struct {
			Line   int     `json:"line"`
			Keep   bool    `json:"keep"`
			Record *Record `json:"record,omitempty"`
		}{Line: i + 1, Keep: keep}
		if keep {
			out.Record = &rec
		}
		j, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	const file = "testdata/golden/apiserver.records.jsonl"
	if *update {
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("records differ from %s (run with -update to accept); got:\n%s", file, b.String())
	}
}

// TestDecodeFacts checks what the golden file shows, so that a regenerated
// file cannot silently accept a regression: the stages, verbs and levels
// that are kept, and what each level tells.
func TestDecodeFacts(t *testing.T) {
	kept := map[string]Record{} // by level/verb/name
	for i, line := range readLines(t, apiserverLog) {
		rec, keep, err := DecodeEvent(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		wantKeep := (ev.Stage == auditv1.StageResponseComplete || ev.Stage == auditv1.StagePanic) &&
			IsWriteVerb(ev.Verb) && !strings.Contains(ev.RequestURI, "dryRun")
		if keep != wantKeep {
			t.Errorf("line %d (%s %s %s): keep = %v, want %v", i+1, ev.Stage, ev.Verb, ev.RequestURI, keep, wantKeep)
		}
		if keep && ev.ObjectRef.Namespace != "kube-system" {
			kept[fmt.Sprintf("%s/%s/%s/%s", rec.Level, rec.Namespace, rec.Verb, rec.Name)] = rec
		}
	}
	for _, tc := range []struct {
		key                  string
		wantResponseUID      bool
		wantResponseRV       bool
		wantName, wantGenPfx string
	}{
		{key: "RequestResponse/rr/create/a", wantResponseUID: true, wantResponseRV: true, wantName: "a"},
		{key: "RequestResponse/rr/update/a", wantResponseUID: true, wantResponseRV: true, wantName: "a"},
		{key: "RequestResponse/rr/delete/a", wantResponseUID: true, wantName: "a"},
		{key: "RequestResponse/rr/deletecollection/"},
		{key: "Metadata/meta/create/a", wantName: "a"},
		{key: "Metadata/meta/create/"}, // generateName: the apiserver fills no name at Metadata level
		{key: "Metadata/meta/delete/a", wantResponseUID: true, wantName: "a"},
		{key: "Metadata/meta/patch/a", wantName: "a"},
	} {
		rec, ok := kept[tc.key]
		if !ok {
			t.Errorf("%s: not kept; kept: %v", tc.key, mapsKeys(kept))
			continue
		}
		if (rec.ResponseUID != "") != tc.wantResponseUID || (rec.ResponseResourceVersion != "") != tc.wantResponseRV {
			t.Errorf("%s: response uid %q rv %q, want uid %v rv %v", tc.key, rec.ResponseUID, rec.ResponseResourceVersion, tc.wantResponseUID, tc.wantResponseRV)
		}
		if rec.User.Username != "admin" || rec.ImpersonatedUser == nil || rec.ImpersonatedUser.Username != "alice" || rec.Username() != "alice" {
			t.Errorf("%s: user %+v impersonated %+v, want admin as alice", tc.key, rec.User, rec.ImpersonatedUser)
		}
		if rec.UserAgent != "explore/1" || !slices.Equal(rec.SourceIPs, []string{"127.0.0.1"}) {
			t.Errorf("%s: userAgent %q sourceIPs %v", tc.key, rec.UserAgent, rec.SourceIPs)
		}
		if !rec.Succeeded() || rec.Completed.Before(rec.Received) || rec.Received.IsZero() {
			t.Errorf("%s: code %d received %v completed %v", tc.key, rec.Code, rec.Received, rec.Completed)
		}
	}
	// The body of an update names the version it applies to.
	if u := kept["Metadata/meta/update/a"]; u.RefResourceVersion != "224" || u.RefUID == "" {
		t.Errorf("Metadata update: objectRef resourceVersion %q uid %q, want 224 and the uid", u.RefResourceVersion, u.RefUID)
	}
	// At RequestResponse level the generateName create is named from its
	// response, and the request's generateName is kept.
	var gen *Record
	for k, r := range kept {
		if strings.HasPrefix(k, "RequestResponse/rr/create/gen-") {
			gen = &r
		}
	}
	if gen == nil || gen.GenerateName != "gen-" || !strings.HasPrefix(gen.Name, "gen-") {
		t.Errorf("generateName create at RequestResponse level: %+v", gen)
	}
}

func mapsKeys(m map[string]Record) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestWireMatchesAPI decodes every event both ways, with the compact wire
// type and with auditv1.Event, and compares the fields kept: the wire
// type's names and shapes must stay those of the API.
func TestWireMatchesAPI(t *testing.T) {
	for i, line := range readLines(t, apiserverLog) {
		rec, keep, err := DecodeEvent(line)
		if err != nil || !keep {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		ref := ev.ObjectRef
		want := []string{string(ev.AuditID), string(ev.Level), ev.Verb, ref.APIGroup, ref.APIVersion, ref.Resource, ref.Subresource,
			ref.Namespace, ev.User.Username, ev.User.UID, strings.Join(ev.User.Groups, ","), ev.UserAgent, strings.Join(ev.SourceIPs, ","),
			ev.RequestReceivedTimestamp.UTC().String(), ev.StageTimestamp.UTC().String(), fmt.Sprint(ev.ResponseStatus.Code), string(ref.UID)}
		got := []string{rec.AuditID, rec.Level, rec.Verb, rec.Group, rec.Version, rec.Resource, rec.Subresource,
			rec.Namespace, rec.User.Username, rec.User.UID, strings.Join(rec.User.Groups, ","), rec.UserAgent, strings.Join(rec.SourceIPs, ","),
			rec.Received.UTC().String(), rec.Completed.UTC().String(), fmt.Sprint(rec.Code), rec.RefUID}
		if !slices.Equal(got, want) {
			t.Errorf("line %d:\n got %q\nwant %q", i+1, got, want)
		}
		if (ev.ImpersonatedUser == nil) != (rec.ImpersonatedUser == nil) ||
			ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username != rec.ImpersonatedUser.Username {
			t.Errorf("line %d: impersonated %+v, want %+v", i+1, rec.ImpersonatedUser, ev.ImpersonatedUser)
		}
		if ref.Name != "" && rec.Name != ref.Name {
			t.Errorf("line %d: name %q, want %q", i+1, rec.Name, ref.Name)
		}
	}
}

// eventList wraps log lines into an EventList body, as the webhook backend
// posts them.
func eventList(lines [][]byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(l)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// TestDecodeEventList decodes the log as one EventList: the same records,
// in order, as line by line.
func TestDecodeEventList(t *testing.T) {
	lines := readLines(t, apiserverLog)
	var want []Record
	for _, l := range lines {
		if rec, keep, _ := DecodeEvent(l); keep {
			want = append(want, rec)
		}
	}
	var got []Record
	counts, err := DecodeEventList(bytes.NewReader(eventList(lines)), func(r Record) error { got = append(got, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if counts.Items != len(lines) || counts.TooLarge != 0 {
		t.Errorf("decoded %+v items, want %d", counts, len(lines))
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("list records differ from line records:\n got %s\nwant %s", gj, wj)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := readLines(t, apiserverLog)[7]
	for _, tc := range []struct {
		name, body, want string
	}{
		{"empty", ``, "unexpected end of input"},
		{"not an object", `[1,2]`, `unexpected [, want "{"`},
		{"wrong kind", `{"kind":"PodList","items":[]}`, `kind "PodList", want EventList`},
		{"wrong version", `{"apiVersion":"audit.k8s.io/v1beta1","items":[]}`, `apiVersion "audit.k8s.io/v1beta1", want audit.k8s.io/v1`},
		{"items not an array", `{"items":{}}`, "items: {, want an array"},
		{"truncated", `{"items":[` + string(good), "items: unexpected end of input"},
		{"bad item", `{"items":[` + string(good) + `,{"stageTimestamp":5}]}`, "items[1]: json: cannot unmarshal number"},
		{"item of another kind", `{"items":[{"kind":"Pod"}]}`, `items[0]: kind "Pod", want Event`},
		{"data after", `{"items":[]} {}`, "data after the list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeEventList(strings.NewReader(tc.body), func(Record) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, line, want string }{
		{"not json", `{"stage":`, "decode audit event: unexpected end of JSON input"},
		{"wrong version", `{"apiVersion":"v1","kind":"Event"}`, `apiVersion "v1"`},
		{"bad time", `{"stage":"ResponseComplete","requestReceivedTimestamp":"yesterday"}`, "decode audit event: parsing time"},
	} {
		t.Run("event/"+tc.name, func(t *testing.T) {
			_, _, err := DecodeEvent([]byte(tc.line))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestDecodeKeeps covers the events the apiserver log above lacks: a
// panic, a failure, a read, a subresource write, a JSON patch body.
func TestDecodeKeeps(t *testing.T) {
	base := func(stage, verb, extra string) string {
		return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"id","stage":"` + stage +
			`","requestURI":"/x","verb":"` + verb + `","user":{"username":"u","extra":{"k":["v"]}},` +
			`"objectRef":{"resource":"widgets","apiGroup":"example.com","apiVersion":"v1","namespace":"n","name":"w","subresource":"status"}` + extra + `}`
	}
	for _, tc := range []struct {
		name     string
		line     string
		keep     bool
		wantCode int32
	}{
		{"panic", base("Panic", "update", ""), true, 500},
		{"conflict", base("ResponseComplete", "update", `,"responseStatus":{"code":409}`), true, 409},
		{"started", base("ResponseStarted", "update", ""), false, 0},
		{"received", base("RequestReceived", "create", ""), false, 0},
		{"get", base("ResponseComplete", "get", `,"responseStatus":{"code":200}`), false, 0},
		{"json patch body", base("ResponseComplete", "patch", `,"responseStatus":{"code":200},"requestObject":[{"op":"add"}],"responseObject":{"metadata":{"uid":"u1","resourceVersion":"9"}}`), true, 200},
		{"odd metadata", base("ResponseComplete", "patch", `,"responseStatus":{"code":200},"requestObject":{"metadata":[1]},"responseObject":"text"`), true, 200},
		{"non-resource", `{"stage":"ResponseComplete","verb":"create","requestURI":"/healthz"}`, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, keep, err := DecodeEvent([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			if keep != tc.keep || rec.Code != tc.wantCode {
				t.Errorf("keep %v code %d, want %v %d", keep, rec.Code, tc.keep, tc.wantCode)
			}
			if keep && (rec.Subresource != "status" || rec.Group != "example.com") {
				t.Errorf("record %+v", rec)
			}
			if tc.name == "json patch body" && (rec.ResponseUID != "u1" || rec.ResponseResourceVersion != "9") {
				t.Errorf("response %q %q", rec.ResponseUID, rec.ResponseResourceVersion)
			}
		})
	}
}

// FuzzDecodeEventList: any input decodes or fails with an error, never a
// panic; DecodeEvent agrees on single events.
func FuzzDecodeEventList(f *testing.F) {
	lines := readLines(f, apiserverLog)
	f.Add(eventList(lines[:3]))
	f.Add(eventList(lines[20:23]))
	f.Add([]byte(`{"items":[{"stage":"Panic","verb":"create","objectRef":{}}]}`))
	f.Add([]byte(`{"items":[{"requestObject":[[[[]]]],"responseObject":{"metadata":{"uid":1}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeEventList(bytes.NewReader(data), func(r Record) error {
			if r.Verb == "" {
				t.Errorf("kept a record without a verb: %+v", r)
			}
			return nil
		})
		_, _, _ = DecodeEvent(data)
	})
}

// TestNoBodiesKept: a RequestResponse event of a Secret write carries the
// secret in both bodies; nothing of them but metadata reaches the record,
// nor the errors of a malformed one.
func TestNoBodiesKept(t *testing.T) {
	const secret = "c3VwZXItc2VjcmV0LXBhc3N3b3Jk" // base64 of the value
	body := `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"db","namespace":"shop","uid":"u1","resourceVersion":"7",` +
		`"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"` + secret + `\"}}"}},"data":{"password":"` + secret + `"}}`
	line := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"a1","stage":"ResponseComplete",` +
		`"requestURI":"/api/v1/namespaces/shop/secrets/db","verb":"update","user":{"username":"alice"},` +
		`"objectRef":{"resource":"secrets","namespace":"shop","name":"db","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},` +
		`"requestObject":` + body + `,"responseObject":` + body + `,` +
		`"requestReceivedTimestamp":"2026-12-03T12:00:00.000000Z","stageTimestamp":"2026-12-03T12:00:00.001000Z"}`
	rec, keep, err := DecodeEvent([]byte(line))
	if err != nil || !keep {
		t.Fatalf("keep %v, %v", keep, err)
	}
	j, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(j), secret) || strings.Contains(fmt.Sprintf("%+v", rec), secret) {
		t.Errorf("the record keeps the secret: %s", j)
	}
	if rec.ResponseUID != "u1" || rec.ResponseResourceVersion != "7" {
		t.Errorf("response metadata %q %q", rec.ResponseUID, rec.ResponseResourceVersion)
	}
	bad := strings.Replace(line, `"password":"`+secret+`"}}`, `"password":`+secret+`}}`, 1)
	if _, _, err := DecodeEvent([]byte(bad)); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("malformed body: error %v", err)
	}
}

// boundsEvent is a kept Metadata-level patch with the given user JSON and
// fields after it.
func boundsEvent(id, user, more string) string {
	return `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + id + `","stage":"ResponseComplete",` +
		`"verb":"patch","user":` + user + `,"objectRef":{"resource":"configmaps","namespace":"n","name":"c","apiVersion":"v1"},` +
		`"responseStatus":{"code":200}` + more + `}`
}

// TestDecodeBounds: an event that would keep more than MaxEventBytes (a
// long username, many groups, a list of too much JSON) is skipped and
// counted and the list goes on; one of more than MaxEventJSONBytes stops
// it; one just under that, of bodies only, decodes.
func TestDecodeBounds(t *testing.T) {
	groups := func(n int, g string) string {
		return `{"username":"u","groups":["` + strings.Repeat(g+`","`, n-1) + g + `"]}`
	}
	ok := boundsEvent("ok", `{"username":"alice","groups":["devs"],"extra":{"k":["v"]}}`, "")
	for _, tc := range []struct {
		name     string
		item     string
		tooLarge bool
		err      error
	}{
		{"a long username", boundsEvent("x", `{"username":"`+strings.Repeat("u", MaxEventBytes)+`"}`, ""), true, nil},
		{"many groups", boundsEvent("x", groups(5000, "group-name"), ""), true, nil},
		{"a million empty groups", boundsEvent("x", groups(1_000_000, ""), ""), true, nil},
		{"many source IPs", boundsEvent("x", `{"username":"u"}`, `,"sourceIPs":["`+strings.Repeat(`10.0.0.1","`, 5000)+`10.0.0.1"]`), true, nil},
		{"an impersonated user of many groups", boundsEvent("x", `{"username":"u"}`, `,"impersonatedUser":`+groups(5000, "group-name")), true, nil},
		{"a large extra is not kept", boundsEvent("x", `{"username":"u","extra":{"k":["`+strings.Repeat("v", 1<<20)+`"]}}`, ""), false, nil},
		{"bodies just under the JSON bound", boundsEvent("x", `{"username":"u"}`, `,"requestObject":{"data":"`+strings.Repeat("b", MaxEventJSONBytes-1024)+`"}`), false, nil},
		{"over the JSON bound", boundsEvent("x", `{"username":"u"}`, `,"requestObject":{"data":"`+strings.Repeat("b", MaxEventJSONBytes)+`"}`), false, ErrEventJSONTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.item) > 1<<20 {
				testenv.SkipShort(t, testenv.LoadTest)
			}
			var kept []string
			body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + ok + "," + tc.item + "," + strings.Replace(ok, `"ok"`, `"ok2"`, 1) + `]}`
			counts, err := DecodeEventList(strings.NewReader(body), func(r Record) error { kept = append(kept, r.AuditID); return nil })
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), "items[1]") {
					t.Fatalf("error %v, want items[1]: %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantKept := []string{"ok", "x", "ok2"}
			if tc.tooLarge {
				wantKept = []string{"ok", "ok2"}
			}
			if !slices.Equal(kept, wantKept) || counts.Items != 3 || counts.TooLarge != map[bool]int{true: 1}[tc.tooLarge] {
				t.Errorf("kept %v, %+v; want %v", kept, counts, wantKept)
			}
			_, _, err = DecodeEvent([]byte(tc.item))
			if got := errors.Is(err, ErrEventTooLarge); got != tc.tooLarge {
				t.Errorf("DecodeEvent: %v, want too large %v", err, tc.tooLarge)
			}
		})
	}
}

// TestDecodeDoesNotAmplify: decoding an event of a million empty groups (3
// MB of JSON, 16 MB as string headers) allocates what the decoder's
// buffer takes to hold the item (doubling up to its size), not the
// strings: the list is refused unread.
func TestDecodeDoesNotAmplify(t *testing.T) {
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
		boundsEvent("x", `{"username":"u","groups":[`+strings.Repeat(`"",`, 1_000_000)+`""]}`, "") + `]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	counts, err := DecodeEventList(bytes.NewReader(body), func(Record) error { return nil })
	runtime.ReadMemStats(&after)
	if err != nil || counts.TooLarge != 1 {
		t.Fatalf("%+v, %v", counts, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(body)) {
		t.Errorf("decoding %d bytes allocated %d", len(body), alloc)
	}
}
