package action

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/fieldwatch/fieldwatch/rules"
)

// KafkaIDHeader is the record header that carries the payload's id.
const KafkaIDHeader = "fieldwatch-id"

// kafkaSink produces payloads as Kafka records through one idempotent
// producer per action (acks from all in-sync replicas), keyed by the
// object's uid. Its instance hands records to the producer in queue
// order (start), so that one object's changes reach its partition in the
// order they happened; a record the producer fails is retried by attempt,
// within the action's retry budget.
type kafkaSink struct {
	spec     *rules.KafkaAction
	topic    *subjectTemplate
	ce       *cloudEvents
	timeout  time.Duration
	buffered int
	// bufferedBytes bounds the payload bytes the producer holds.
	bufferedBytes int64
	log           *slog.Logger
	brokers       string // for errors

	mu     sync.Mutex
	cl     *kgo.Client
	closed bool
}

var (
	_ handler      = &kafkaSink{}
	_ closer       = &kafkaSink{}
	_ asyncHandler = &kafkaSink{}
)

func newKafka(spec *rules.KafkaAction, buffered int, bufferedBytes int64, log *slog.Logger) *kafkaSink {
	k := &kafkaSink{
		spec:          spec,
		topic:         newSubjectTemplate(spec.Topic, validTopic),
		ce:            newCloudEvents(spec.CloudEvents),
		timeout:       spec.Timeout,
		buffered:      buffered,
		bufferedBytes: bufferedBytes,
		log:           log,
		brokers:       strings.Join(spec.Brokers, ","),
	}
	if k.timeout <= 0 {
		k.timeout = rules.DefaultKafkaTimeout
	}
	return k
}

// record builds the record of it.
func (k *kafkaSink) record(it *item) (*kgo.Record, error) {
	topic, err := k.topic.render(it.f.Payload)
	if err != nil {
		return nil, permanent(fmt.Errorf("topic: %w", err))
	}
	r := &kgo.Record{
		Topic:   topic,
		Key:     []byte(it.f.Object.UID),
		Value:   it.f.Payload,
		Headers: []kgo.RecordHeader{{Key: KafkaIDHeader, Value: []byte(it.f.ID)}},
	}
	if k.ce != nil {
		if k.ce.binary() {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(PayloadContentType)})
			k.ce.headers(&it.f, "ce_", func(key, v string) {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: key, Value: []byte(v)})
			})
		} else {
			if r.Value, err = k.ce.structured(&it.f, it.f.Payload); err != nil {
				return nil, permanent(err)
			}
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "content-type", Value: []byte(CloudEventsContentType)})
		}
	}
	return r, nil
}

// attempt produces it and waits for its acknowledgement.
func (k *kafkaSink) attempt(ctx context.Context, it *item) error {
	cl, err := k.client()
	if err != nil {
		return err
	}
	r, err := k.record(it)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	return k.classify(r.Topic, cl.ProduceSync(ctx, r).FirstErr())
}

// start hands it to the producer without waiting; done is called once
// with the outcome (from the producer's goroutine: it must not block).
func (k *kafkaSink) start(ctx context.Context, it *item, done func(error)) {
	cl, err := k.client()
	if err != nil {
		done(err)
		return
	}
	r, err := k.record(it)
	if err != nil {
		done(err)
		return
	}
	cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		done(k.classify(r.Topic, err))
	})
}

// classify wraps a produce error: one the broker will answer the same way
// again (the record is too large, the topic name is invalid, access is
// denied) is permanent; the rest (timeouts, leader changes, brokers down,
// an unknown topic that may yet be created) are retried.
func (k *kafkaSink) classify(topic string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("produce to %s on %s: %w", topic, k.brokers, err)
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return permanent(err)
	}
	return err
}

// client returns the action's producer, building it on first use (it
// connects lazily, and reconnects on its own).
func (k *kafkaSink) client() (*kgo.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, permanent(errors.New("kafka action closed"))
	}
	if k.cl != nil {
		return k.cl, nil
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.spec.Brokers...),
		kgo.ClientID("fieldwatch"),
		// Idempotence is franz-go's default; it requires acks=all.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(k.timeout),
		kgo.ProduceRequestTimeout(k.timeout),
		// The producer holds at most what the action's queue holds: the
		// records the worker has started and not yet seen acknowledged.
		kgo.MaxBufferedRecords(k.buffered),
		kgo.MaxBufferedBytes(int(k.bufferedBytes)),
	}
	tlsConf, err := k.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsConf))
	}
	if s := k.spec.SASL; s != nil {
		mech, err := saslMechanism(s)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, permanent(fmt.Errorf("kafka client: %w", err))
	}
	k.cl = cl
	return cl, nil
}

// tlsConfig is nil without TLS; with files, they are re-read when they
// change.
func (k *kafkaSink) tlsConfig() (*tls.Config, error) {
	files := tlsFiles{ca: k.spec.CAFile, cert: k.spec.CertFile, key: k.spec.KeyFile}
	if files == (tlsFiles{}) {
		if !k.spec.TLS {
			return nil, nil
		}
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	}
	return files.config()
}

// saslMechanism reads the password from its file or variable at every
// connection, so a rotated password is picked up.
func saslMechanism(s *rules.KafkaSASL) (sasl.Mechanism, error) {
	read := secretReader(s.PasswordFile, s.PasswordEnv)
	if _, err := read(); err != nil {
		return nil, fmt.Errorf("kafka sasl password: %w", err)
	}
	switch s.Mechanism {
	case rules.SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pw, err := read()
			return plain.Auth{User: s.Username, Pass: string(pw)}, err
		}), nil
	case rules.SASLScramSHA256, rules.SASLScramSHA512:
		auth := func(context.Context) (scram.Auth, error) {
			pw, err := read()
			return scram.Auth{User: s.Username, Pass: string(pw)}, err
		}
		if s.Mechanism == rules.SASLScramSHA256 {
			return scram.Sha256(auth), nil
		}
		return scram.Sha512(auth), nil
	}
	return nil, permanent(fmt.Errorf("sasl mechanism %q", s.Mechanism))
}

// close flushes what the producer holds (the instance has no firing left
// by then) and closes its connections.
func (k *kafkaSink) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.cl != nil {
		k.cl.Close()
		k.cl = nil
	}
}

// validTopic checks a rendered topic name as Kafka does: 1 to 249 of
// [a-zA-Z0-9._-], and neither "." nor "..".
func validTopic(s string) error {
	if s == "" || len(s) > 249 {
		return fmt.Errorf("topic %q: a topic name has 1 to 249 characters", s)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("topic %q is not a valid name", s)
	}
	for _, r := range s {
		if !topicRune(r) {
			return fmt.Errorf("topic %q: only letters, digits, '.', '_' and '-' are allowed", s)
		}
	}
	return nil
}

// topicRune reports whether r may appear in a topic name.
func topicRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return r == '.' || r == '_' || r == '-'
}
