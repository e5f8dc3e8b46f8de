// Package action delivers the JSON payloads of rule firings to where the
// rules send them: it runs the log, webhook, exec, event, patch, nats,
// kafka, alertmanager, slack, teams, pagerduty and email actions of
// fieldwatch rules (docs/rules.md, "Actions", and docs/notify.md document
// their options for users), and guarantees that no firing is silently lost
// (docs/guarantees.md). The slack, teams, pagerduty and email actions send
// one message for a group of firings (group.go); each firing of a group is
// delivered, or dead-lettered, with its message.
//
// A program that evaluates changes with package rules hands each
// rules.Firing to a Dispatcher, which runs every action of the firing's
// rule:
//
//	d, err := action.New(action.Options{StateDir: "/var/lib/fieldwatch"})
//	...
//	firings, _ := set.Eval(c)
//	for _, f := range firings {
//		err := d.Deliver(ctx, f, func() { /* every action is done with f */ })
//	}
//	...
//	err = d.Close(ctx) // drains the queues, dead-letters what is left
//
// Deliver blocks while an action's queue is full, so a slow receiver slows
// its producer instead of losing firings; a firing that fails for good is
// written to the dead-letter file (DeadLetter). Delivery is at least once:
// receivers drop duplicates by the payload's id. Retain keeps the actions
// of reloaded rules, Abort hands the undelivered firings of a replica that
// stopped leading over to the next leader.
//
// For the receivers of the webhook action, Sign and VerifySignature are the
// two halves of its HMAC-SHA256 signing scheme.
//
// action may import client-go (for the event and patch actions), package
// rules (for the specs it runs) and package payload (to read a payload).
// It must not import package watcher (the command wires the two
// together), nor internal/testenv outside tests: TestDependencies keeps it
// so.
package action
