package change

// Observed says how fieldwatch saw a change: one write, as one watch event
// delivered it, or the net effect of writes it could not see one by one.
// It is the payload's "observed" (left out for a watch event) and CEL's
// observed.
type Observed string

// The ways a change is observed.
const (
	// ObservedWatch: one watch event, so one write; the old object is the
	// state that write replaced.
	ObservedWatch Observed = "watch"
	// ObservedRelist: the informer listed the resource again while
	// running (after its watch broke off or its resourceVersion expired,
	// 410 Gone; or the first list of a resource that appeared, or whose
	// watched version or projection changed) and compared the list with
	// what it held: the net effect of the writes since, possibly several.
	ObservedRelist Observed = "relist"
	// ObservedRestart: found at start by comparing the objects with the
	// restart baseline: the net effect of what changed while no process
	// watched, when the apiserver could no longer replay the writes since
	// the baseline one by one.
	ObservedRestart Observed = "restart"
	// ObservedTakeover: delivered by a new leader for an object whose
	// previous state it could not know (a standby that started without a
	// baseline while the leader ran): the object as that standby first
	// listed it.
	ObservedTakeover Observed = "takeover"
)
