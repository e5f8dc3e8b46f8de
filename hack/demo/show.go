package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// payload is what show reads of a payload (docs/payload.md).
type payload struct {
	Rule      string `json:"rule"`
	Type      string `json:"type"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Resource  struct {
		Kind string `json:"kind"`
	} `json:"resource"`
	Actor *struct {
		Manager string `json:"manager"`
		Match   string `json:"match"`
		User    *struct {
			Username string `json:"username"`
		} `json:"user"`
		ImpersonatedUser *struct {
			Username string `json:"username"`
		} `json:"impersonatedUser"`
	} `json:"actor"`
	Changes []struct {
		Path     string `json:"path"`
		Value    any    `json:"value"`
		OldValue any    `json:"oldValue"`
	} `json:"changes"`
	CRD *struct {
		Breaking int `json:"breaking"`
		Scanned  int `json:"scanned"`
		Checks   []struct {
			Check, Field, Severity string
		} `json:"checks"`
		Impact []struct {
			Check, Field, Effect string
			Count                int
			Objects              []struct{ Namespace, Name string }
		} `json:"impact"`
	} `json:"crd"`
}

// show prints a payload: a summary line (what changed, who changed it,
// for a CRD change its breaking checks and the objects they hit), then
// the JSON.
func show(line string) {
	var p payload
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		fmt.Println("   " + line)
		return
	}
	where := p.Name
	if p.Namespace != "" {
		where = p.Namespace + "/" + p.Name
	}
	summary := []string{p.Rule + ":", p.Type, p.Resource.Kind, where}
	if a := p.Actor; a != nil {
		who := "(no audit event)"
		switch {
		case a.ImpersonatedUser != nil:
			who = a.ImpersonatedUser.Username
		case a.User != nil:
			who = a.User.Username
		}
		summary = append(summary, "by", who, "("+strings.TrimPrefix(a.Manager+", ", ", ")+"match "+a.Match+")")
	}
	if p.CRD == nil {
		for _, c := range p.Changes {
			summary = append(summary, fmt.Sprintf("%s: %v -> %v", c.Path, c.OldValue, c.Value))
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
