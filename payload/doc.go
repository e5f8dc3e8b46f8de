// Package payload is the JSON payload a fieldwatch rule produces each time
// it fires, as a Go type: what the log action writes, the webhook POSTs,
// exec writes to a program's stdin and NATS and Kafka publish (the data of
// their CloudEvents). docs/payload.md describes it for every reader; the
// doc comments of Payload and its parts are the contract, and a test holds
// the two to each other.
//
// A receiver written in Go decodes what it receives:
//
//	var p payload.Payload
//	if err := payload.Unmarshal(body, &p); err != nil {
//		// not a fieldwatch payload: answer 400
//	}
//	for _, c := range p.Changes {
//		fmt.Println(p.Namespace, p.Name, c.Op, c.Path, string(c.OldValue), "->", string(c.Value))
//	}
//
// fieldwatch builds payloads with an encoder of its own (package rules,
// for speed), not from these types; its tests decode every payload its
// cases produce into Payload with unknown keys rejected and encode it
// again, so that the type and the bytes cannot drift apart.
//
// Package payload must import nothing of Kubernetes and nothing of
// fieldwatch but package change, whose types (Type, Observed, Attribution,
// GuardOverride) it reuses, so that a receiver pulls in no client-go:
// TestDependencies keeps it so.
package payload
