package rules

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/fieldwatch/fieldwatch/fileerr"
)

// Routing: an action's when chooses, per firing, whether that action gets
// it, so that one rule sends a team's namespaces to its channel and the
// rest elsewhere without being copied. The expression sees what a rule's
// when sees (object, oldObject, actor, observed, and crd in rules on
// CustomResourceDefinitions) and two shorthands: meta, the object's
// namespace, name and labels (the old object's for a deletion; namespace
// "" for a cluster-scoped object, labels {} when it has none), and user
// (who made the change, the impersonated user when there is one; "" when
// unknown). (namespace is a reserved word in CEL: meta.namespace.) It is evaluated
// once the rule fires, with the same cost bounds; a runtime error skips
// the action and is reported like a when's.

var (
	routeEnvOnce sync.Once
	routeEnvs    [2]*cel.Env // without and with crd
	routeEnvErr  error
)

// routeEnv returns the environment of actions' when expressions: the
// rules' (celEnv) with meta and user.
func routeEnv(withCRD bool) (*cel.Env, error) {
	routeEnvOnce.Do(func() {
		for i, crd := range []bool{false, true} {
			base, err := celEnv(crd)
			if err != nil {
				routeEnvErr = err
				return
			}
			routeEnvs[i], routeEnvErr = base.Extend(
				cel.Variable("meta", cel.MapType(cel.StringType, cel.DynType)),
				cel.Variable("user", cel.StringType),
			)
			if routeEnvErr != nil {
				return
			}
		}
	})
	if withCRD {
		return routeEnvs[1], routeEnvErr
	}
	return routeEnvs[0], routeEnvErr
}

// routeWhen compiles an action's when at field path p ("" for none).
func (c *compiler) routeWhen(src, p string, withCRD bool) *celExpr {
	if src == "" {
		return nil
	}
	x, issues := compileCELIn(routeEnv, src, withCRD)
	for _, is := range issues {
		c.errs = append(c.errs, &fileerr.Error{Path: p, Msg: "CEL: " + is.msg, ExprLine: is.line, ExprCol: is.col})
	}
	return x
}

// readsUser reports whether an expression names the variable user.
func readsUser(x *celExpr, src string) bool {
	env, err := routeEnv(false)
	if err != nil || x == nil {
		return false
	}
	parsed, iss := env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return false
	}
	found := ast.MatchDescendants(ast.NavigateAST(parsed.NativeRep()), func(e ast.NavigableExpr) bool {
		return e.Kind() == ast.IdentKind && e.AsIdent() == "user"
	})
	return len(found) > 0
}

// routeVar returns the shorthand variable name of an action's when.
func (v *celVars) routeVar(name string) ref.Val {
	meta := v.c.meta()
	switch name {
	case "meta":
		m, _ := meta["metadata"].(map[string]any)
		l, _ := m["labels"].(map[string]any)
		if l == nil {
			l = map[string]any{}
		}
		return celValue(map[string]any{"namespace": metaString(meta, "namespace"), "name": metaString(meta, "name"), "labels": l})
	case "user":
		if a := v.c.Attribution; a != nil {
			return types.String(a.Username())
		}
		return types.String("")
	}
	return types.NullValue
}

// route evaluates the when of each of r's actions that has one and returns
// the indices of those that do not get this firing, with the errors of
// those that failed (skipped too).
func (r *Rule) route(st *evalState) (skipped []int, errs []error) {
	for i := range r.Actions {
		x := r.Actions[i].when
		if x == nil {
			continue
		}
		if st.vars == nil {
			st.vars = newCELVars(st.c)
		}
		ok, err := r.routeOne(st, x)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: actions[%d].when: %w", r.Name, i, err))
		}
		if !ok {
			skipped = append(skipped, i)
		}
	}
	return skipped, errs
}

func (r *Rule) routeOne(st *evalState, x *celExpr) (bool, error) {
	if x.usesCRD {
		v, err := st.crdView(r.crd == crdImpact, r.crdPolicy)
		if err != nil {
			return false, fmt.Errorf("crd: %w", err)
		}
		if st.vars.crd, err = v.celValue(); err != nil {
			return false, fmt.Errorf("crd: %w", err)
		}
	}
	ok, err := x.eval(st.vars)
	if err != nil && (len(r.redact) > 0 || isSecret(st.c.Resource.Group, st.c.Resource.Resource)) {
		return false, fmt.Errorf("%s", celErrorClass(err))
	}
	return ok, err
}

// routed reports whether any of r's actions has a when.
func (r *Rule) routed() bool {
	for i := range r.Actions {
		if r.Actions[i].when != nil {
			return true
		}
	}
	return false
}
