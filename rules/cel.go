package rules

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// CostLimit bounds the runtime cost of one evaluation of a rule's when
// expression (in CEL cost units, about one per operation or list item
// visited; Kubernetes uses the same limit per validation rule). An
// expression that exceeds it is stopped and returned as an evaluation
// error: one rule cannot stall the watcher.
//
// Metering costs time (a tracker per evaluation; BenchmarkEvalCELMetered1
// beside BenchmarkEvalCEL1), so it is left out for expressions whose
// cost cannot grow beyond linear in the object's size: no loops (the all,
// exists, exists_one, map, filter macros and the like), only calls of
// linearFunctions, and few of them (maxUnmeteredCalls), and for those
// that add to these one regex match of a constant pattern (refused before
// it runs when it alone would cost more than CostLimit). Everything else
// is metered.
const CostLimit = 1_000_000

// The cost limit also bounds memory: whatever builds a string, bytes or a
// list costs in proportion to what it builds (a tenth of a unit per byte,
// as cel-go prices string concatenation, and a unit per list item), so
// that the strings and lists one evaluation builds add up to about
// 10 MB at most. A single call that would build more than
// MaxCELStringBytes at once (replace can grow a string quadratically) is
// refused before it builds it.
const MaxCELStringBytes = 10 << 20

// linearFunctions are the CEL functions whose cost is at most linear in
// the size of their arguments: an expression calling only these (and
// without loops) is bounded by the object's size without metering.
// Quadratic ones (sets.contains, replace with a long argument, ...) are
// not listed, nor is matches (pattern size times string size).
var linearFunctions = map[string]bool{
	operators.Conditional: true, operators.LogicalAnd: true, operators.LogicalOr: true,
	operators.LogicalNot: true, operators.Equals: true, operators.NotEquals: true,
	operators.Less: true, operators.LessEquals: true, operators.Greater: true,
	operators.GreaterEquals: true, operators.Add: true, operators.Subtract: true,
	operators.Multiply: true, operators.Divide: true, operators.Modulo: true,
	operators.Negate: true, operators.Index: true, operators.OptIndex: true,
	operators.OptSelect: true, operators.In: true, operators.NotStrictlyFalse: true,
	"size": true, "contains": true, "startsWith": true, "endsWith": true,
	"int": true, "uint": true, "double": true, "string": true, "bool": true, "bytes": true,
	"type": true, "dyn": true, "timestamp": true, "duration": true,
	"orValue": true, "hasValue": true, "value": true, "optional.of": true,
	"optional.ofNonZeroValue": true, "optional.none": true, "or": true,
	"lowerAscii": true, "upperAscii": true, "trim": true, "charAt": true,
	"indexOf": true, "lastIndexOf": true, "substring": true,
	"sum": true, "min": true, "max": true,
}

var (
	celEnvOnce sync.Once
	celEnvs    [2]*cel.Env // without and with crd
	celEnvErr  error
)

// celEnv returns the environment when expressions compile in: object and
// oldObject (dyn, null when absent), actor (dyn, every key present),
// observed (a string: how the change was seen), and
// with withCRD crd (dyn: the CRD
// comparison, declared only for rules that match CustomResourceDefinitions
// only); numbers compared across int and double (JSON numbers come as
// either), optional types (object.?spec.size), the strings, sets and
// lists extensions, and sum, min and max over lists of numbers
// (listNumberFunctions).
func celEnv(withCRD bool) (*cel.Env, error) {
	celEnvOnce.Do(func() {
		opts := []cel.EnvOption{
			cel.Variable("object", cel.DynType),
			cel.Variable("oldObject", cel.DynType),
			cel.Variable("actor", cel.DynType),
			cel.Variable("observed", cel.StringType),
			cel.CrossTypeNumericComparisons(true),
			cel.OptionalTypes(),
			cel.DefaultUTCTimeZone(true),
			ext.Strings(),
			ext.Sets(),
			ext.Lists(ext.ListsMaxRangeSize(10_000)),
		}
		opts = append(opts, listNumberFunctions()...)
		opts = append(opts, boundedReplace(), boundedJoin())
		opts = append(opts, boundedSearch()...)
		if celEnvs[0], celEnvErr = cel.NewEnv(opts...); celEnvErr != nil {
			return
		}
		celEnvs[1], celEnvErr = celEnvs[0].Extend(cel.Variable("crd", cel.DynType))
	})
	if withCRD {
		return celEnvs[1], celEnvErr
	}
	return celEnvs[0], celEnvErr
}

// boundedReplace redefines the strings extension's replace (same
// overloads, same results) to refuse, before building it, a result longer
// than MaxCELStringBytes: s.replace("", s) on a 1 MiB value would build a
// terabyte.
func boundedReplace() cel.EnvOption {
	str := cel.StringType
	replace := func(args []ref.Val, n int) ref.Val {
		s, old, new := string(args[0].(types.String)), string(args[1].(types.String)), string(args[2].(types.String))
		count := strings.Count(s, old)
		if n >= 0 && n < count {
			count = n
		}
		if size := len(s) + count*(len(new)-len(old)); count > 0 && len(new) > len(old) && (size > MaxCELStringBytes || count > MaxCELStringBytes/(len(new)-len(old))) {
			return types.NewErr("replace would build a string of more than %d bytes", MaxCELStringBytes)
		}
		return types.String(strings.Replace(s, old, new, n))
	}
	return cel.Function("replace",
		cel.MemberOverload("string_replace_string_string", []*cel.Type{str, str, str}, str,
			cel.FunctionBinding(func(args ...ref.Val) ref.Val { return replace(args, -1) })),
		cel.MemberOverload("string_replace_string_string_int", []*cel.Type{str, str, str, cel.IntType}, str,
			cel.FunctionBinding(func(args ...ref.Val) ref.Val {
				n := int64(args[3].(types.Int))
				if n < 0 {
					n = -1
				}
				return replace(args, int(min(n, math.MaxInt32)))
			})),
	)
}

// boundedJoin redefines the strings extension's join (same overloads,
// same results) to refuse, before building it, a result longer than
// MaxCELStringBytes: a list of a thousand copies of a 1 MiB value costs
// little to make and a gigabyte to join.
func boundedJoin() cel.EnvOption {
	join := func(list ref.Val, sep string) ref.Val {
		l := list.(traits.Lister)
		n := int(l.Size().(types.Int))
		strs := make([]string, n)
		size := 0
		for i := range n {
			item := l.Get(types.Int(i))
			str, ok := item.(types.String)
			if !ok {
				return types.NewErr("join: invalid input: %v", item)
			}
			strs[i] = string(str)
			if size += len(str) + len(sep); size > MaxCELStringBytes {
				return types.NewErr("join would build a string of more than %d bytes", MaxCELStringBytes)
			}
		}
		return types.String(strings.Join(strs, sep))
	}
	strList := cel.ListType(cel.StringType)
	return cel.Function("join",
		cel.MemberOverload("list_join", []*cel.Type{strList}, cel.StringType,
			cel.UnaryBinding(func(list ref.Val) ref.Val { return join(list, "") })),
		cel.MemberOverload("list_join_string", []*cel.Type{strList, cel.StringType}, cel.StringType,
			cel.BinaryBinding(func(list, sep ref.Val) ref.Val { return join(list, string(sep.(types.String))) })),
	)
}

// listNumberKinds are the element types of the lists sum, min and max
// take, in the order their overloads are tried on a dyn list (by its
// first item; an empty dyn list takes the first, int).
var listNumberKinds = []struct {
	name string
	typ  *cel.Type
	zero ref.Val
}{
	{"int", cel.IntType, types.Int(0)},
	{"uint", cel.UintType, types.Uint(0)},
	{"double", cel.DoubleType, types.Double(0)},
}

// listNumberFunctions declares <list>.sum(), <list>.min() and
// <list>.max() over lists of numbers, with the semantics of the
// Kubernetes CEL list library (k8s.io/apiserver/pkg/cel/library, which
// rules must not import, it pulls in client-go): a list of ints gives an
// int, of uints a uint, of doubles a double; the sum of an empty list is
// 0 (an int, unless the list is typed: [1.0].filter(x, false).sum() is
// 0.0), min and max of an empty list are errors, and so is integer
// overflow. A dyn list (what object's lists are) is checked at runtime:
// items of mixed types ([1, 2.5]) or that are not numbers are errors.
// The overload names are the library's. celCosts charges them per item.
func listNumberFunctions() []cel.EnvOption {
	var sums, mins, maxes []cel.FunctionOpt
	for _, k := range listNumberKinds {
		list := []*cel.Type{cel.ListType(k.typ)}
		sums = append(sums, cel.MemberOverload("list_"+k.name+"_sum_"+k.name, list, k.typ,
			cel.UnaryBinding(sumList(k.zero))))
		mins = append(mins, cel.MemberOverload("list_"+k.name+"_min_"+k.name, list, k.typ,
			cel.UnaryBinding(extremeList("min", k.zero, types.IntNegOne))))
		maxes = append(maxes, cel.MemberOverload("list_"+k.name+"_max_"+k.name, list, k.typ,
			cel.UnaryBinding(extremeList("max", k.zero, types.IntOne))))
	}
	return []cel.EnvOption{cel.Function("sum", sums...), cel.Function("min", mins...), cel.Function("max", maxes...)}
}

// sumList returns the sum of a list whose items all have zero's type.
func sumList(zero ref.Val) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		l, ok := v.(traits.Lister)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		acc := zero
		i := 0
		for it := l.Iterator(); it.HasNext() == types.True; i++ {
			item := it.Next()
			if err := checkListItem("sum", zero, item, i); err != nil {
				return err
			}
			if acc = acc.(traits.Adder).Add(item); types.IsError(acc) {
				return acc
			}
		}
		return acc
	}
}

// extremeList returns the item of a list (whose items must all have
// zero's type) that compares as want (-1: min, 1: max) to every other;
// the first of equal ones.
func extremeList(name string, zero, want ref.Val) func(ref.Val) ref.Val {
	return func(v ref.Val) ref.Val {
		l, ok := v.(traits.Lister)
		if !ok {
			return types.MaybeNoSuchOverloadErr(v)
		}
		var best ref.Val
		i := 0
		for it := l.Iterator(); it.HasNext() == types.True; i++ {
			item := it.Next()
			if err := checkListItem(name, zero, item, i); err != nil {
				return err
			}
			if best == nil {
				best = item
				continue
			}
			switch c := item.(traits.Comparer).Compare(best); {
			case types.IsError(c):
				return c
			case c == want:
				best = item
			}
		}
		if best == nil {
			return types.NewErr("%s called on empty list", name)
		}
		return best
	}
}

// checkListItem returns an error when item i of a list given to fn is not
// of zero's type.
func checkListItem(fn string, zero, item ref.Val, i int) ref.Val {
	if types.IsError(item) {
		return item
	}
	if want, got := zero.Type().TypeName(), item.Type().TypeName(); got != want {
		return types.NewErr("%s: list item %d is %s, not %s: the items must all be ints, all uints or all doubles", fn, i, got, want)
	}
	return nil
}

// celCosts prices, for metered expressions, the functions whose cost
// cel-go's default (one unit per call) would understate: sum, min and max
// cost one unit per item, as in Kubernetes, and so does in (x in list),
// matches costs regexCost, and the functions that build strings, bytes
// or lists (builders) cost what they build. cel-go prices those itself only
// where the checker resolved one overload, which an object's dyn values
// rarely allow. Each metered program has its own.
type celCosts struct {
	// patterns are the constant patterns of the program's matches calls
	// and their instructions (written while the program is planned, read
	// only after).
	patterns map[string]int
}

// builders are the functions whose result may be a string, bytes or list
// they built (not one of their arguments, nor a part of one).
var builders = map[string]bool{
	operators.Add: true, "format": true, "string": true, "bytes": true, "join": true, "split": true,
	"replace": true, "lowerAscii": true, "upperAscii": true, "trim": true, "substring": true,
	"reverse": true, "strings.quote": true, "charAt": true, "sort": true, "sortBy": true,
	"distinct": true, "flatten": true, "slice": true, "lists.range": true,
}

// CallCost implements interpreter.ActualCostEstimator.
func (c *celCosts) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	if builders[function] {
		var cost uint64
		switch r := result.(type) {
		case types.String:
			cost = 1 + uint64(len(r))/10
		case types.Bytes:
			cost = 1 + uint64(len(r))/10
		case traits.Lister:
			if n, ok := r.Size().(types.Int); ok {
				cost = 1 + uint64(n)
			}
		}
		if cost > 0 {
			return &cost
		}
		return nil
	}
	switch function {
	case overloads.Matches:
		cost := c.matchesCost(args, result)
		return &cost
	case operators.In:
		cost := uint64(1)
		if len(args) == 2 {
			if l, ok := args[1].(traits.Lister); ok {
				if n, ok := l.Size().(types.Int); ok && n > 1 {
					cost = uint64(n)
				}
			}
		}
		return &cost
	case "sum", "min", "max":
		if len(args) != 1 {
			return nil
		}
		cost := uint64(1)
		if l, ok := args[0].(traits.Sizer); ok {
			if n, ok := l.Size().(types.Int); ok && n > 1 {
				cost = uint64(n)
			}
		}
		return &cost
	}
	return nil
}

var _ interpreter.ActualCostEstimator = (*celCosts)(nil)

// celExpr is a compiled when expression.
type celExpr struct {
	src string
	prg cel.Program
	// metered is true when the program runs with CostLimit; loops is
	// true when it has loops, which it runs within MaxEvalTime.
	metered, loops bool
	// paths are the object field prefixes the expression reads; full is
	// true when it reads object or oldObject in a way paths cannot say.
	paths [][]string
	full  bool
	// usesCRD is true when the expression reads the crd variable.
	usesCRD bool
	// actorAudit is true when it reads actor's audit fields (or actor
	// whole).
	actorAudit bool
}

// celIssue is a compile error of an expression, at a 1-based line and
// column of the expression text.
type celIssue struct {
	line, col int
	msg       string
}

// crdUndeclared is how cel-go reports crd used where it is not declared.
const crdUndeclared = "undeclared reference to 'crd'"

// compileCEL type-checks src (it must return a bool) and plans it with the
// cost limit; withCRD declares the crd variable. It returns every compile
// issue.
func compileCEL(src string, withCRD bool) (*celExpr, []celIssue) {
	return compileCELIn(celEnv, src, withCRD)
}

// compileCELIn is compileCEL in the environments envOf returns (with and
// without crd).
func compileCELIn(envOf func(withCRD bool) (*cel.Env, error), src string, withCRD bool) (*celExpr, []celIssue) {
	env, err := envOf(withCRD)
	if err != nil {
		return nil, []celIssue{{1, 1, "CEL environment: " + err.Error()}}
	}
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var out []celIssue
		for _, e := range iss.Errors() {
			msg := strings.ReplaceAll(e.Message, " (in container '')", "")
			if strings.Contains(msg, crdUndeclared) {
				msg += " (crd is declared only in rules whose every match.resources entry selects CustomResourceDefinitions: " +
					"{group: apiextensions.k8s.io, kind: CustomResourceDefinition})"
			}
			out = append(out, celIssue{e.Location.Line(), e.Location.Column() + 1, msg})
		}
		return nil, out
	}
	if t := checked.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, []celIssue{{1, 1, fmt.Sprintf("must return a bool, not %s", t)}}
	}
	x := &celExpr{src: src, metered: needsMetering(checked.NativeRep()), loops: hasLoops(checked.NativeRep())}
	if withCRD {
		// Whether it reads crd (rather than, say, a loop variable of that
		// name): it does when it does not compile without crd.
		plain, _ := envOf(false)
		_, iss := plain.Compile(src)
		x.usesCRD = iss != nil && iss.Err() != nil
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if x.metered {
		opts = append(opts, meteredOptions(x.loops)...)
	} else {
		opts = append(opts, unmeteredOptions()...)
	}
	if x.prg, err = env.Program(checked, opts...); err != nil {
		return nil, []celIssue{{1, 1, err.Error()}}
	}
	x.paths, x.full = celPaths(checked.NativeRep())
	x.actorAudit = celActorAudit(checked.NativeRep())
	return x, nil
}

// maxUnmeteredCalls bounds the calls of an unmetered expression, so that
// its cost stays a small multiple of the object's size.
const maxUnmeteredCalls = 32

// needsMetering reports whether an expression loops, calls a function not
// in linearFunctions, adds anything but numbers (a chain of string
// concatenations costs quadratic memory), makes more than
// maxUnmeteredCalls calls, or more than one of matches, or one whose
// pattern is not a constant.
func needsMetering(a *ast.AST) bool {
	if hasLoops(a) {
		return true
	}
	root := ast.NavigateAST(a)
	calls := ast.MatchDescendants(root, ast.KindMatcher(ast.CallKind))
	if len(calls) > maxUnmeteredCalls {
		return true
	}
	matches := 0
	for _, call := range calls {
		name := call.AsCall().FunctionName()
		if name == overloads.Matches {
			// One match of a constant pattern: refused when it alone
			// would cost more than CostLimit (celRegex.match), so
			// bounded as a metered expression is.
			if matches++; matches > 1 || !constantPattern(call.AsCall()) {
				return true
			}
			continue
		}
		if !linearFunctions[name] {
			return true
		}
		if name == operators.Add {
			switch a.GetType(call.ID()).Kind() {
			case types.IntKind, types.UintKind, types.DoubleKind, types.DurationKind, types.TimestampKind:
			default:
				return true
			}
		}
	}
	return false
}

// constantPattern reports whether a call of matches has a string literal
// for its pattern (its last argument, in both forms).
func constantPattern(call ast.CallExpr) bool {
	args := call.Args()
	if len(args) == 0 || args[len(args)-1].Kind() != ast.LiteralKind {
		return false
	}
	_, ok := args[len(args)-1].AsLiteral().Value().(string)
	return ok
}

// hasLoops reports whether an expression has comprehensions (the all,
// exists, exists_one, map, filter macros and the like).
func hasLoops(a *ast.AST) bool {
	return len(ast.MatchDescendants(ast.NavigateAST(a), ast.KindMatcher(ast.ComprehensionKind))) > 0
}

// celPaths finds the parts of object and oldObject an expression reads:
// for every use of either variable, the chain of constant field selections
// (object.spec.size, object["spec"], object.?spec) directly on it. A use
// with no selection (the whole object passed to a function, say) makes
// the result full.
func celPaths(a *ast.AST) (paths [][]string, full bool) {
	root := ast.NavigateAST(a)
	for _, id := range ast.MatchDescendants(root, ast.KindMatcher(ast.IdentKind)) {
		if name := id.AsIdent(); name != "object" && name != "oldObject" {
			continue
		}
		var chain []string
		cur := id
		for {
			parent, ok := cur.Parent()
			if !ok {
				break
			}
			field, ok := selectedField(parent, cur.ID())
			if !ok {
				break
			}
			chain = append(chain, field)
			cur = parent
		}
		if len(chain) == 0 {
			return nil, true
		}
		paths = append(paths, chain)
	}
	return paths, false
}

// celActorAudit reports whether an expression reads actor other than
// through actor.manager and actor.operation: those come from
// managedFields, everything else from the audit stream.
func celActorAudit(a *ast.AST) bool {
	root := ast.NavigateAST(a)
	for _, id := range ast.MatchDescendants(root, ast.KindMatcher(ast.IdentKind)) {
		if id.AsIdent() != "actor" {
			continue
		}
		parent, ok := id.Parent()
		if !ok {
			return true
		}
		field, ok := selectedField(parent, id.ID())
		if !ok || !actorManagedFieldsKeys[field] {
			return true
		}
	}
	return false
}

// selectedField returns the constant field e selects on its operand
// (which must be the expression with id operand).
func selectedField(e ast.NavigableExpr, operand int64) (string, bool) {
	switch e.Kind() {
	case ast.SelectKind:
		s := e.AsSelect()
		if s.Operand().ID() == operand {
			return s.FieldName(), true
		}
	case ast.CallKind:
		c := e.AsCall()
		switch c.FunctionName() {
		case operators.Index, operators.OptIndex, operators.OptSelect:
			args := c.Args()
			if len(args) == 2 && args[0].ID() == operand && args[1].Kind() == ast.LiteralKind {
				if s, ok := args[1].AsLiteral().Value().(string); ok {
					return s, true
				}
			}
		}
	}
	return "", false
}

// celVars binds object, oldObject, crd, actor and observed for one
// evaluation. The
// values are converted to CEL values once per change (actor when first
// read) and shared by every rule; crd is set before each evaluation that
// declares it (rules with and without the impact see different values).
type celVars struct {
	object, oldObject ref.Val
	crd               ref.Val
	c                 *Change
	actor             ref.Val
}

func newCELVars(c *Change) *celVars {
	v := &celVars{object: types.NullValue, oldObject: types.NullValue, crd: types.NullValue, c: c}
	if c.New != nil {
		v.object = celValue(c.New)
	}
	if c.Old != nil {
		v.oldObject = celValue(c.Old)
	}
	return v
}

// celValue converts plain JSON values to a CEL value.
func celValue(v any) ref.Val {
	env, _ := celEnv(false)
	return env.CELTypeAdapter().NativeToValue(v)
}

// ResolveName implements interpreter.Activation.
func (v *celVars) ResolveName(name string) (any, bool) {
	switch name {
	case "object":
		return v.object, true
	case "oldObject":
		return v.oldObject, true
	case "crd":
		return v.crd, true
	case "actor":
		if v.actor == nil {
			v.actor = celValue(actorValue(v.c))
		}
		return v.actor, true
	case "observed":
		return types.String(v.c.observed()), true
	case "meta", "user":
		return v.routeVar(name), true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (v *celVars) Parent() interpreter.Activation { return nil }

var _ interpreter.Activation = (*celVars)(nil)

var errNotBool = errors.New("result is not a bool")

// celErrorClasses are the kinds of runtime errors CEL evaluation gives,
// without the values some of them quote.
var celErrorClasses = []string{
	"no such key", "no such attribute", "no such overload", "no matching overload",
	"type conversion error", "division by zero", "modulus by zero",
	"index out of bounds", "index out of range", "overflow", "cost limit exceeded", "time limit exceeded",
	"error parsing regexp", "would build a string of more than", "called on empty list",
	"list item", errNotBool.Error(), "panic",
}

// celErrorClass returns the class of a when expression's runtime error,
// quoting nothing of the values evaluated: "no such key", "type conversion
// error", ... or "evaluation error" for any other.
func celErrorClass(err error) string {
	msg := err.Error()
	for _, c := range celErrorClasses {
		if strings.Contains(msg, c) {
			return c + " (details withheld: the object's values are redacted)"
		}
	}
	return "evaluation error (details withheld: the object's values are redacted)"
}

// eval evaluates the expression. A runtime error (no such key, cost limit
// exceeded, a non-bool result) is returned, never panicked.
func (x *celExpr) eval(vars *celVars) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			ok, err = false, fmt.Errorf("panic: %v", r)
		}
	}()
	var out ref.Val
	if x.metered {
		out, err = evalMetered(x.prg, vars, x.loops)
	} else {
		out, _, err = x.prg.Eval(vars)
	}
	if err != nil {
		return false, err
	}
	b, isBool := out.(types.Bool)
	if !isBool {
		return false, fmt.Errorf("%w: %s", errNotBool, out.Type().TypeName())
	}
	return bool(b), nil
}
