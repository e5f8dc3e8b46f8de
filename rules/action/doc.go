// Package action delivers the JSON payloads of rule firings: it runs the
// log, webhook, exec, event and patch actions of fieldwatch rules
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
// Order is kept by the log action (one writer) only; the other actions
// run several workers each.
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
