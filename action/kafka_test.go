package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// No Kafka broker can be installed on the machines this project is
// tested on: these tests run the kafka action against franz-go's kfake, a
// Kafka cluster in the test process that speaks the Kafka protocol on
// 127.0.0.1. The action's code path is the one a real broker gets.

// kafkaTestPassword is the SASL password of the test cluster's user.
const kafkaTestPassword = "s3cret-kafka-password"

// kafkaCluster is a kfake cluster with SASL PLAIN, persisted to a
// directory so that a test can close it and start it again on the same
// port and data.
type kafkaCluster struct {
	t    testing.TB
	dir  string
	port int

	requests  atomic.Int64       // produce requests
	onProduce func(n int64) bool // if set, called with the count on each produce request; true fails it
	acks      atomic.Int64       // produce requests with acks=-1
	otherAcks atomic.Int64       // produce requests with other acks
	noPID     atomic.Int64       // produce requests whose batches have no producer id

	mu sync.Mutex
	c  *kfake.Cluster
}

func startKafka(t testing.TB, topics ...string) *kafkaCluster {
	t.Helper()
	// The first start picks a free port (0); restarts reuse it.
	k := &kafkaCluster{t: t, dir: t.TempDir()}
	k.start(topics...)
	t.Cleanup(k.stop)
	return k
}

func (k *kafkaCluster) start(topics ...string) {
	k.t.Helper()
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.DataDir(k.dir), kfake.SyncWrites(),
		kfake.SeedTopics(3, topics...),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", "fieldwatch", kafkaTestPassword),
	}
	if k.port != 0 {
		opts = append(opts, kfake.Ports(k.port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		k.t.Fatal(err)
	}
	if k.port == 0 {
		addr, err := net.ResolveTCPAddr("tcp", c.ListenAddrs()[0])
		if err != nil {
			k.t.Fatal(err)
		}
		k.port = addr.Port
	}
	// Look at every produce request, and let it through.
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if n := k.requests.Add(1); k.onProduce != nil && k.onProduce(n) {
			// The connection is closed without an answer.
			return nil, errors.New("broker going down"), true
		}
		if pr.Acks == -1 {
			k.acks.Add(1)
		} else {
			k.otherAcks.Add(1)
		}
		for _, tp := range pr.Topics {
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil && b.ProducerID < 0 {
					k.noPID.Add(1)
				}
			}
		}
		return nil, nil, false
	})
	k.mu.Lock()
	k.c = c
	k.mu.Unlock()
}

func (k *kafkaCluster) stop() {
	k.mu.Lock()
	c := k.c
	k.c = nil
	k.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (k *kafkaCluster) addr() string { return fmt.Sprintf("127.0.0.1:%d", k.port) }

// records consumes topic from the start until it has n records (or fails
// the test after a minute).
func (k *kafkaCluster) records(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.addr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SASL(mustPlain(kafkaTestPassword)),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func mustPlain(pw string) sasl.Mechanism {
	return plain.Auth{User: "fieldwatch", Pass: pw}.AsMechanism()
}

func kafkaRule(name string, spec *rules.KafkaAction) *rules.Rule {
	return &rules.Rule{Name: name, Actions: []rules.Action{{Kafka: spec}}}
}

// objectFirings returns, for each of objects objects, changes firings of r
// in the order they happened, interleaved between objects; the payload's
// "seq" is the change's position in its object's history.
func objectFirings(r *rules.Rule, objects, changes int) []rules.Firing {
	var out []rules.Firing
	for c := range changes {
		for o := range objects {
			uid := fmt.Sprintf("%s-uid-%d", r.Name, o)
			rv := strconv.Itoa(c + 1)
			id := uid + "/" + rv + "/" + r.Name
			payload, _ := json.Marshal(map[string]any{
				"id": id, "time": "2026-12-02T12:00:00.000000Z", "rule": r.Name, "type": "updated",
				"resource":  map[string]any{"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"},
				"namespace": "default", "name": fmt.Sprintf("w%d", o), "uid": uid, "resourceVersion": rv, "seq": c,
			})
			out = append(out, rules.Firing{ID: id, Rule: r, Payload: payload, Time: firingTime, Type: change.Updated, Object: rules.ObjectRef{
				Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget",
				Namespace: "default", Name: fmt.Sprintf("w%d", o), UID: uid, ResourceVersion: rv,
			}})
		}
	}
	return out
}

// checkOrdered checks that records hold every firing exactly once, keyed
// by the object's uid with the id header, and each object's changes in
// order.
func checkOrdered(t *testing.T, recs []*kgo.Record, firings []rules.Firing) {
	t.Helper()
	seen := map[string]int{}
	last := map[string]int{}
	for _, r := range recs {
		var p struct {
			UID string `json:"uid"`
			Seq int    `json:"seq"`
			ID  string `json:"id"`
		}
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("record value %q: %v", r.Value, err)
		}
		if string(r.Key) != p.UID {
			t.Errorf("record key %q, want the uid %q", r.Key, p.UID)
		}
		var hid string
		for _, h := range r.Headers {
			if h.Key == KafkaIDHeader {
				hid = string(h.Value)
			}
		}
		if hid != p.ID {
			t.Errorf("header %s = %q, want %q", KafkaIDHeader, hid, p.ID)
		}
		seen[p.ID]++
		if prev, ok := last[p.UID]; ok && p.Seq != prev+1 {
			t.Errorf("object %s: change %d follows change %d", p.UID, p.Seq, prev)
		}
		last[p.UID] = p.Seq
	}
	for _, f := range firings {
		if seen[f.ID] != 1 {
			t.Errorf("%s is %d times in the topic, want once", f.ID, seen[f.ID])
		}
	}
	if len(recs) != len(firings) {
		t.Errorf("%d records, want %d", len(recs), len(firings))
	}
}

// TestKafkaProduce: records go to the rendered topic through SASL PLAIN,
// keyed by uid, in order per object, from an idempotent producer asking
// for acks from all in-sync replicas.
func TestKafkaProduce(t *testing.T) {
	k := startKafka(t, "fw.widgets")
	pwFile := filepath.Join(t.TempDir(), "password")
	writeFile(t, pwFile, kafkaTestPassword+"\n")
	h := newHarness(t, nil)
	r := kafkaRule("kafka-produce", &rules.KafkaAction{
		Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw.{{.resource.resource}}"),
		SASL:  &rules.KafkaSASL{Mechanism: "PLAIN", Username: "fieldwatch", PasswordFile: pwFile},
		Retry: fastRetry,
	})
	firings := objectFirings(r, 5, 100)
	dc := newDoneCounter(t)
	for _, f := range firings {
		h.deliver(t, f, dc.fn(f.ID))
	}
	testenv.Eventually(t, 30*time.Second, "every record acknowledged", func() bool { return dc.total.Load() == int64(len(firings)) })
	checkOrdered(t, k.records(t, "fw.widgets", len(firings)), firings)
	if k.acks.Load() == 0 || k.otherAcks.Load() != 0 || k.noPID.Load() != 0 {
		t.Errorf("produce requests: %d with acks=all, %d with other acks, %d without a producer id; want only idempotent acks=all",
			k.acks.Load(), k.otherAcks.Load(), k.noPID.Load())
	}
	if got := h.metric(t, "delivered_total", "kafka-produce", "kafka", 0); got != float64(len(firings)) {
		t.Errorf("delivered_total = %v", got)
	}
	if strings.Contains(h.logs.String(), kafkaTestPassword) {
		t.Error("the logs hold the password")
	}
}

// TestKafkaCloudEvents: structured events decode with the SDK; binary
// ones carry ce_* headers (Kafka protocol binding) and the payload.
func TestKafkaCloudEvents(t *testing.T) {
	k := startKafka(t, "fw.structured", "fw.binary")
	t.Setenv("FW_KAFKA_PASSWORD", kafkaTestPassword)
	h := newHarness(t, nil)
	auth := &rules.KafkaSASL{Mechanism: "PLAIN", Username: "fieldwatch", PasswordEnv: "FW_KAFKA_PASSWORD"}
	rs := kafkaRule("kafka-ce-s", &rules.KafkaAction{Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw.structured"), SASL: auth, CloudEvents: &rules.CloudEvents{}, Retry: fastRetry})
	rb := kafkaRule("kafka-ce-b", &rules.KafkaAction{Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw.binary"), SASL: auth, CloudEvents: &rules.CloudEvents{Mode: "binary"}, Retry: fastRetry})
	fs, fb := newFiring(rs), newFiring(rb)
	dc := newDoneCounter(t)
	h.deliver(t, fs, dc.fn(fs.ID))
	h.deliver(t, fb, dc.fn(fb.ID))
	testenv.Eventually(t, 30*time.Second, "both acknowledged", func() bool { return dc.total.Load() == 2 })

	s := k.records(t, "fw.structured", 1)[0]
	var e cloudevents.Event
	if err := json.Unmarshal(s.Value, &e); err != nil {
		t.Fatalf("the SDK does not decode %s: %v", s.Value, err)
	}
	checkEvent(t, e, fs, "io.fieldwatch.updated", "/fieldwatch/apis/example.com/v1/widgets")
	if string(s.Key) != fs.Object.UID {
		t.Errorf("key = %q", s.Key)
	}

	b := k.records(t, "fw.binary", 1)[0]
	got := map[string]string{}
	for _, hd := range b.Headers {
		got[hd.Key] = string(hd.Value)
	}
	want := map[string]string{
		"ce_specversion": "1.0", "ce_id": fb.ID, "ce_type": "io.fieldwatch.updated", "ce_source": "/fieldwatch/apis/example.com/v1/widgets",
		"ce_subject": "default/" + fb.Object.Name, "ce_time": "2026-12-02T12:00:00.000000Z", "content-type": "application/json",
		KafkaIDHeader: fb.ID,
	}
	for key, v := range want {
		if got[key] != v {
			t.Errorf("binary header %s = %q, want %q", key, got[key], v)
		}
	}
	if string(b.Value) != string(fb.Payload) {
		t.Errorf("binary value = %s, want the payload", b.Value)
	}
}

// TestKafkaBrokerRestart: 2,000 records of 10 objects produced while the
// broker is closed and started again on the same data mid-stream: every
// record is in the topic exactly once (the idempotent producer's
// retries are deduplicated by the broker), each object's in order.
func TestKafkaBrokerRestart(t *testing.T) {
	k := startKafka(t, "fw.widgets")
	// The broker goes down at the second produce request of the run:
	// the request's connection is closed unanswered and the broker is
	// closed. (Closing kfake while it applies a request, rather than
	// before, loses acknowledged records now and then under -race: kfake
	// saves its state to disk concurrently with that request.)
	reached := make(chan struct{})
	var once sync.Once
	k.onProduce = func(n int64) bool {
		if n < 2 {
			return false
		}
		once.Do(func() { close(reached) })
		return true
	}
	t.Setenv("FW_KAFKA_PASSWORD", kafkaTestPassword)
	h := newHarness(t, nil)
	r := kafkaRule("kafka-restart", &rules.KafkaAction{
		Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw.widgets"), Timeout: 30 * time.Second,
		SASL:  &rules.KafkaSASL{Mechanism: "PLAIN", Username: "fieldwatch", PasswordEnv: "FW_KAFKA_PASSWORD"},
		Retry: rules.Retry{Attempts: 100, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	})
	firings := objectFirings(r, 10, 200)
	n := int64(len(firings))
	dc := newDoneCounter(t)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		for _, f := range firings {
			if err := h.Deliver(context.Background(), f, dc.fn(f.ID)); err != nil {
				t.Errorf("Deliver: %v", err)
				return
			}
		}
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("no second produce request in 30s")
	}
	downAt := dc.total.Load()
	k.stop()
	k.onProduce = nil
	k.start("fw.widgets")
	<-delivered
	testenv.Eventually(t, 60*time.Second, "every record acknowledged", func() bool { return dc.total.Load() == n })
	if downAt == n {
		t.Fatal("every record was acknowledged before the broker closed: the test restarted nothing")
	}
	checkOrdered(t, k.records(t, "fw.widgets", int(n)), firings)
	if dl := h.deadLetters(t); len(dl) != 0 {
		t.Errorf("%d dead letters, first %+v", len(dl), dl[0])
	}
	t.Logf("%d of %d acknowledged when the broker closed; failed attempts %v", downAt, n, h.metric(t, "failed_total", "kafka-restart", "kafka", 0))
}

// TestKafkaDeadLetter: with no broker, a record is retried within its
// budget and dead-lettered, the password in neither the dead letter nor
// the logs; a topic that renders to an invalid name is dead-lettered at
// once.
func TestKafkaDeadLetter(t *testing.T) {
	k := startKafka(t, "fw.widgets")
	k.stop()
	t.Setenv("FW_KAFKA_PASSWORD", kafkaTestPassword)
	h := newHarness(t, nil)
	auth := &rules.KafkaSASL{Mechanism: "SCRAM-SHA-256", Username: "fieldwatch", PasswordEnv: "FW_KAFKA_PASSWORD"}
	down := kafkaRule("kafka-down", &rules.KafkaAction{Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw.widgets"), SASL: auth, Timeout: time.Second, Retry: fastRetry})
	bad := kafkaRule("kafka-bad-topic", &rules.KafkaAction{Brokers: []string{k.addr()}, Topic: mustTemplate(t, "fw/{{.name}}"), SASL: auth, Retry: fastRetry})
	dc := newDoneCounter(t)
	fb := newFiring(bad)
	h.deliver(t, fb, dc.fn(fb.ID))
	fd := newFiring(down)
	h.deliver(t, fd, dc.fn(fd.ID))
	testenv.Eventually(t, 60*time.Second, "both dead-lettered", func() bool { return dc.total.Load() == 2 })
	byID := map[string]DeadLetter{}
	for _, dl := range h.deadLetters(t) {
		byID[dl.ID] = dl
		if strings.Contains(dl.Error, kafkaTestPassword) {
			t.Errorf("dead letter holds the password: %+v", dl)
		}
	}
	if dl := byID[fb.ID]; dl.Attempts != 1 || !strings.Contains(dl.Error, "only letters, digits") {
		t.Errorf("bad topic dead letter = %+v", dl)
	}
	if dl := byID[fd.ID]; dl.Attempts != fastRetry.Attempts || dl.Action != "kafka" || !strings.Contains(dl.Error, "produce to fw.widgets on "+k.addr()) {
		t.Errorf("broker-down dead letter = %+v", dl)
	}
	if strings.Contains(h.logs.String(), kafkaTestPassword) {
		t.Error("the logs hold the password")
	}
}
