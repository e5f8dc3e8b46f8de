// Package action delivers the JSON payloads of rule firings: it runs the
// log, webhook, exec, event, patch, nats and kafka actions of fieldwatch
// rules
// (docs/rules.md, "Actions", documents their options for users) and
// guarantees that no firing is silently lost (docs/guarantees.md).
//
// A Dispatcher gives every action of every rule, identified by the rule's
// name, the action's index and its spec, its own bounded queue and its own
// workers, so that one slow receiver slows neither the other actions nor
// the watcher, until its queue is full: then Deliver blocks (backpressure)
// instead of dropping the firing. Failed deliveries are retried with
// exponential backoff and jitter, honouring Retry-After; a firing that fails
// for good, or that is still undelivered when Close's grace period ends, is
// written to the dead-letter file <state-dir>/dead-letter.jsonl. Deliver's
// done callback tells the caller when a firing is handled, so that it can
// persist its progress. Delivery is at least once: a receiver drops
// duplicates by the payload's id (the webhook's Idempotency-Key header).
// Order is kept by the log action (one writer) and the kafka action (one
// worker hands records to the producer in queue order; a record the
// producer gives up on is retried later, out of order); the other actions
// run several workers each.
//
// The nats action publishes to JetStream with the payload's id as the
// Nats-Msg-Id (the stream's duplicate window drops repeats); the kafka
// action produces through an idempotent franz-go producer with acks=all,
// keyed by the object's uid. Each holds one connection, opened on first
// use, reconnecting on its own, closed when its workers stop (reload or
// Close). The webhook, nats and kafka actions can send CloudEvents 1.0,
// structured or binary (cloudevents.go writes the spec out; the tests
// decode it with the CloudEvents SDK).
//
// Metrics (registered on Options.Registerer), each with the labels rule,
// action (the action's kind) and index (its position in the rule):
// fieldwatch_action_fired_total, _delivered_total, _failed_total (failed
// attempts), _retried_total, _dead_lettered_total, the gauge
// fieldwatch_action_queue_depth and the histogram
// fieldwatch_action_delivery_seconds (Deliver to delivered).
//
// The webhook action signs request bodies with HMAC-SHA256 when asked;
// VerifySignature is the receiver's half of that scheme, for Go receivers.
//
// action may import client-go for the event and patch actions, and package
// rules for the specs it runs. It must not import package watcher (the
// command wires the two together), nor internal/testenv outside tests.
package action
