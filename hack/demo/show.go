package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fieldwatch/fieldwatch/payload"
)

// show prints a payload: a summary line (what changed, who changed it,
// for a CRD change its breaking checks and the objects they hit), then
// the JSON.
func show(line string) {
	var p payload.Payload
	if err := payload.Unmarshal([]byte(line), &p); err != nil {
		fmt.Println("   " + line)
		return
	}
	where := p.Name
	if p.Namespace != "" {
		where = p.Namespace + "/" + p.Name
	}
	summary := []string{p.Rule + ":", string(p.Type), p.Resource.Kind, where}
	if a := p.Actor; a != nil {
		who := a.Username()
		if who == "" {
			who = "(no audit event)"
		}
		summary = append(summary, "by", who, "("+strings.TrimPrefix(a.Manager+", ", ", ")+"match "+string(a.Match)+")")
	}
	if p.CRD == nil {
		for _, c := range p.Changes {
			summary = append(summary, fmt.Sprintf("%s: %s -> %s", c.Path, orNone(c.OldValue), orNone(c.Value)))
		}
	} else if len(p.Changes) > 0 {
		summary = append(summary, fmt.Sprintf("(%d schema changes)", len(p.Changes)))
	}
	fmt.Printf("   -> %s\n", strings.Join(summary, " "))
	if crd := p.CRD; crd != nil && crd.Breaking > 0 {
		for _, c := range crd.Checks {
			if c.Severity != "safe" {
				fmt.Printf("      check %s %s: %s\n", c.Check, c.Field, c.Severity)
			}
		}
		fmt.Printf("      %d widgets checked\n", crd.Scanned)
		for _, im := range crd.Impact {
			var names []string
			for _, o := range im.Objects {
				names = append(names, o.Namespace+"/"+o.Name)
			}
			fmt.Printf("      %s by %s %s: %d (%s)\n", im.Effect, im.Check, im.Field, im.Count, strings.Join(names, ", "))
		}
	}
	fmt.Printf("      %s\n", line)
}

// orNone returns a change's value as JSON, "<nil>" when absent.
func orNone(v json.RawMessage) string {
	if v == nil {
		return "<nil>"
	}
	return string(v)
}
