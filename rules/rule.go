package rules

// Rule is one compiled rule of a rules file.
type Rule struct {
	// Name is the rule's unique name.
	Name string
	// Actions are run, each with the same payload, when the rule fires.
	Actions []Action
}
