package examples_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// kafkaPassword is the SCRAM password of the test cluster's user.
const kafkaPassword = "example-kafka-password"

// TestKafkaEvents runs examples/kafka-events through `fieldwatch run`
// against a Kafka cluster in the test process (franz-go's kfake: no Kafka
// broker can be installed where this project is tested) that speaks TLS
// and SASL SCRAM-SHA-512, as the example's brokers do: each change is one
// record on the topic of its resource, keyed by the object's uid, a binary
// CloudEvent whose value is the payload with the object; a status change
// and a Service of another namespace produce nothing.
func TestKafkaEvents(t *testing.T) {
	k := startKafkaTLS(t, "fieldwatch.services", "fieldwatch.ingresses")

	// The example's rules, with the broker, password and CA of this test.
	src, err := os.ReadFile("kafka-events/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile, caFile := filepath.Join(dir, "password"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(pwFile, []byte(kafkaPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, k.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	rulesText := string(src)
	for _, r := range [][2]string{
		{`["kafka-0.kafka:9093", "kafka-1.kafka:9093", "kafka-2.kafka:9093"]`, `["` + k.addr + `"]`},
		{"/var/run/secrets/kafka/password", pwFile},
		{"/var/run/secrets/kafka/ca.crt", caFile},
	} {
		if !strings.Contains(rulesText, r[0]) {
			t.Fatalf("the example's rules have no %s where this test expects it", r[0])
		}
		rulesText = strings.ReplaceAll(rulesText, r[0], r[1])
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rulesText), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{"shop", "payments", "staging"} {
		ensureNamespace(t, ns)
	}
	fw := startFieldwatch(t, rulesFile)
	ctx := context.Background()
	cs := testenv.Shared(t).Clientset(t)
	services := cs.CoreV1().Services("shop")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kafka-checkout"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "checkout"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	var rvs []string
	change := func(what string, do func() (*corev1.Service, error)) {
		t.Helper()
		fw.step(t, what, func() error {
			got, err := do()
			if err == nil {
				svc = got
				rvs = append(rvs, got.ResourceVersion)
			}
			return err
		})
	}
	change("create", func() (*corev1.Service, error) { return services.Create(ctx, svc, metav1.CreateOptions{}) })
	change("new port", func() (*corev1.Service, error) {
		c := svc.DeepCopy()
		c.Spec.Ports[0].Port = 8000
		return services.Update(ctx, c, metav1.UpdateOptions{})
	})
	change("a load balancer address: quiet", func() (*corev1.Service, error) {
		c := svc.DeepCopy()
		c.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
		return services.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	})
	fw.unwatched(t, "a Service in staging", func() error {
		other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kafka-checkout"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "checkout"}, Ports: []corev1.ServicePort{{Port: 80}},
		}}
		_, err := cs.CoreV1().Services("staging").Create(ctx, other, metav1.CreateOptions{})
		return err
	})
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "kafka-pay"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: "pay.example.com",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "pay", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}
	fw.step(t, "ingress created", func() error {
		got, err := cs.NetworkingV1().Ingresses("payments").Create(ctx, ing, metav1.CreateOptions{})
		ing = got
		return err
	})
	fw.step(t, "delete", func() error { return services.Delete(ctx, svc.Name, metav1.DeleteOptions{}) })

	type want struct {
		id, typ, subject string
		port             float64 // of the object's one port, when set
	}
	uid := string(svc.UID)
	for _, tt := range []struct {
		topic, source, key string
		want               []want
	}{
		{"fieldwatch.services", "//shop-prod/api/v1/services", uid, []want{
			{uid + "/" + rvs[0] + "/exposure-changed", "created", "shop/kafka-checkout", 80},
			{uid + "/" + rvs[1] + "/exposure-changed", "updated", "shop/kafka-checkout", 8000},
			{uid + "/deleted/exposure-changed", "deleted", "shop/kafka-checkout", 8000},
		}},
		{"fieldwatch.ingresses", "//shop-prod/apis/networking.k8s.io/v1/ingresses", string(ing.UID), []want{
			{string(ing.UID) + "/" + ing.ResourceVersion + "/exposure-changed", "created", "payments/kafka-pay", 0},
		}},
	} {
		// The delete is the last change of the Service and its record
		// the last of its partition: a record of the status change
		// would stand before it.
		recs := k.records(t, tt.topic, len(tt.want))
		if len(recs) != len(tt.want) {
			t.Fatalf("%s holds %d records, want %d", tt.topic, len(recs), len(tt.want))
		}
		for i, w := range tt.want {
			r := recs[i]
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			var p payload
			if err := json.Unmarshal(r.Value, &p); err != nil {
				t.Fatalf("%s record %d: value %s: %v", tt.topic, i, r.Value, err)
			}
			if string(r.Key) != tt.key || p.ID != w.id || string(p.Type) != w.typ || headers["fieldwatch-id"] != w.id ||
				headers["ce_id"] != w.id || headers["ce_type"] != "io.fieldwatch."+w.typ || headers["ce_source"] != tt.source ||
				headers["ce_subject"] != w.subject || headers["ce_specversion"] != "1.0" || headers["content-type"] != "application/json" {
				t.Errorf("%s record %d: key %s, payload id %s type %s, headers %v; want key %s and %+v", tt.topic, i, r.Key, p.ID, p.Type, headers, tt.key, w)
			}
			// The object rides along (includeObject), its status left out
			// of the changes but not of the object.
			obj := p.object()
			if w.typ == "deleted" {
				obj = p.oldObject()
			}
			spec, _ := obj["spec"].(map[string]any)
			if spec == nil {
				t.Errorf("%s record %d carries no object: %s", tt.topic, i, r.Value)
			}
			if w.port != 0 {
				ports, _ := spec["ports"].([]any)
				if len(ports) != 1 || ports[0].(map[string]any)["port"] != w.port {
					t.Errorf("%s record %d: the object's ports are %v, want port %v", tt.topic, i, ports, w.port)
				}
			}
		}
	}
}

// kafkaTLS is a kfake cluster with TLS (a certificate for 127.0.0.1
// issued by caPEM) and SASL SCRAM-SHA-512.
type kafkaTLS struct {
	addr  string
	caPEM []byte
}

// startKafkaTLS starts a one-broker kfake cluster on 127.0.0.1 with the
// topics (three partitions each); it stops when the test ends.
func startKafkaTLS(t *testing.T, topics ...string) *kafkaTLS {
	t.Helper()
	ca, err := testenv.NewCA("fieldwatch-example-kafka-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.ServerCert("kafka")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1), kfake.SeedTopics(3, topics...),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "fieldwatch", kafkaPassword),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr, err := net.ResolveTCPAddr("tcp", c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return &kafkaTLS{addr: "127.0.0.1:" + strconv.Itoa(addr.Port), caPEM: ca.CertPEM}
}

// records consumes topic from the start until it has n records, or fails
// the test after waitTimeout.
func (k *kafkaTLS) records(t *testing.T, topic string, n int) []*kgo.Record {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(k.caPEM)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: "fieldwatch", Pass: kafkaPassword}.AsSha512Mechanism()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s in %s", len(out), n, topic, waitTimeout)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
