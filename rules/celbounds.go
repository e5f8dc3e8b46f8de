package rules

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// MaxEvalTime bounds the wall-clock time of one evaluation of a metered
// when expression that loops, a backstop behind CostLimit: a loop is
// stopped when it runs longer, whatever its cost says. What reaches it
// takes more time than it is charged: cel-go's cost tracking itself takes
// time that grows with the square of a loop's iterations
// (BenchmarkCELLongLoop shows the growth), and comparing whole objects is
// charged by their top-level keys. Calls are not interrupted: the one
// that could run long, matches, is refused before it starts when it
// would cost more than CostLimit.
const MaxEvalTime = 5 * time.Second

// interruptEvery is how many loop iterations run between checks of
// MaxEvalTime.
const interruptEvery = 10

// regexCost is the cost, in CEL cost units, of matching a regex compiled
// to insts instructions against a string of n bytes. It is the price
// Kubernetes gives a regex in CRD validation rules (a tenth of a unit per
// byte of the string, plus one, times a quarter of a unit per byte of the
// pattern: cel-go's interpreter/runtimecost.go, which
// k8s.io/apiserver/pkg/cel/library/cost.go uses for find and findAll),
// with the pattern's compiled instructions in place of its bytes: RE2
// matches in time proportional to the string times the program, and a
// short pattern can make a large program (a{1000} is 7 bytes and 1,002
// instructions). BenchmarkCELMatches measures RE2's slowest case per
// instruction and byte, and so what a full CostLimit of matching takes.
func regexCost(insts, n int) uint64 {
	str := uint64(math.Ceil(float64(1+n) * 0.1))
	re := uint64(math.Ceil(float64(insts) * 0.25))
	if re > 0 && str > math.MaxUint64/re {
		return math.MaxUint64
	}
	return str * re
}

// celRegex is a compiled matches pattern and the size of its program.
type celRegex struct {
	re    *regexp.Regexp
	insts int
}

// compileRegex compiles pattern as cel-go's matches does (RE2, Perl
// flags) and counts its instructions as regexp does.
func compileRegex(pattern string) (*celRegex, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return &celRegex{re: re, insts: regexInsts(pattern)}, nil
}

// regexInsts returns the number of instructions pattern compiles to (0
// when it does not compile).
func regexInsts(pattern string) int {
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// match matches s, refusing before it starts a match that would cost more
// than CostLimit by itself (the cost tracker charges a call only once it
// returns, too late to stop one that runs for minutes).
func (r *celRegex) match(s string) ref.Val {
	if cost := regexCost(r.insts, len(s)); cost > CostLimit {
		return types.NewErr("cost limit exceeded: matches would cost %d units (a pattern of %d instructions against %d bytes), more than the limit of %d",
			cost, r.insts, len(s), CostLimit)
	}
	return types.Bool(r.re.MatchString(s))
}

// decMatches replaces the calls of matches whose pattern is not a
// constant with calls that compile the pattern and refuse, before it
// runs, a match that would cost more than CostLimit. (The standard
// library binds matches as a singleton, which an overload cannot
// redefine; the constant patterns are compiled once, by
// celCosts.regexOptimizations.)
func decMatches(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok || call.Function() != overloads.Matches || len(call.Args()) != 2 {
		return i, nil
	}
	return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(args ...ref.Val) ref.Val {
		if len(args) != 2 {
			return types.NoSuchOverloadErr()
		}
		str, ok := args[0].(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(args[0])
		}
		pat, ok := args[1].(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(args[1])
		}
		r, err := compileRegex(string(pat))
		if err != nil {
			return types.WrapErr(err)
		}
		return r.match(string(str))
	}), nil
}

// regexOptimizations compile the constant patterns of matches once, when
// the expression is planned, into calls that refuse a match costing more
// than CostLimit; they replace cel-go's (which would match unchecked) by
// overload id, which the checker always resolves for matches. c records
// each pattern's size for CallCost.
func (c *celCosts) regexOptimizations() []*interpreter.RegexOptimization {
	factory := func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
		r, err := compileRegex(pattern)
		if err != nil {
			return nil, err
		}
		c.patterns[pattern] = r.insts
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(args ...ref.Val) ref.Val {
			if len(args) != 2 {
				return types.NoSuchOverloadErr()
			}
			s, ok := args[0].(types.String)
			if !ok {
				return types.MaybeNoSuchOverloadErr(args[0])
			}
			return r.match(string(s))
		}), nil
	}
	return []*interpreter.RegexOptimization{
		{Function: overloads.Matches, OverloadID: overloads.Matches, RegexIndex: 1, Factory: factory},
		{Function: overloads.Matches, OverloadID: overloads.MatchesString, RegexIndex: 1, Factory: factory},
	}
}

// matchesCost is the cost of a matches call that ran (one refused costs
// one unit: it did no work).
func (c *celCosts) matchesCost(args []ref.Val, result ref.Val) uint64 {
	if len(args) != 2 || types.IsError(result) {
		return 1
	}
	s, ok := args[0].(types.String)
	pattern, ok2 := args[1].(types.String)
	if !ok || !ok2 {
		return 1
	}
	insts, ok := c.patterns[string(pattern)]
	if !ok {
		insts = regexInsts(string(pattern))
	}
	return regexCost(insts, len(s))
}

// boundedSearch redefines the strings extension's indexOf and lastIndexOf
// (same overloads, same results) to search in time linear in the
// string's length: the extension compares the runes of the substring at
// every position, which a 1 MiB string and a 512 KiB substring turn into
// minutes.
func boundedSearch() []cel.EnvOption {
	str := cel.StringType
	args3 := func(f func(s, sub string, off int64) ref.Val) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			return f(string(args[0].(types.String)), string(args[1].(types.String)), int64(args[2].(types.Int)))
		}
	}
	return []cel.EnvOption{
		cel.Function("indexOf",
			cel.MemberOverload("string_index_of_string", []*cel.Type{str, str}, cel.IntType,
				cel.BinaryBinding(func(s, sub ref.Val) ref.Val {
					return indexOf(string(s.(types.String)), string(sub.(types.String)), 0)
				})),
			cel.MemberOverload("string_index_of_string_int", []*cel.Type{str, str, cel.IntType}, cel.IntType,
				cel.FunctionBinding(args3(indexOf)))),
		cel.Function("lastIndexOf",
			cel.MemberOverload("string_last_index_of_string", []*cel.Type{str, str}, cel.IntType,
				cel.BinaryBinding(func(s, sub ref.Val) ref.Val {
					str, substr := string(s.(types.String)), string(sub.(types.String))
					runes := utf8.RuneCountInString(str)
					if substr == "" {
						return types.Int(runes)
					}
					if len(str) < len(substr) {
						return types.Int(-1)
					}
					return lastIndexOf(str, substr, int64(runes-1))
				})),
			cel.MemberOverload("string_last_index_of_string_int", []*cel.Type{str, str, cel.IntType}, cel.IntType,
				cel.FunctionBinding(args3(lastIndexOf)))),
	}
}

// validRunes returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as converting it to runes does: the runes of the
// result are the runes of s.
func validRunes(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s))
}

// runeOffset returns the byte offset of rune n of s (len(s) past the
// end).
func runeOffset(s string, n int64) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// indexOf returns the index (in runes) of the first occurrence of sub in
// s at or after rune off, -1 if none: the strings extension's indexOf.
func indexOf(s, sub string, off int64) ref.Val {
	if off < 0 {
		return types.NewErr("index out of range: %d", off)
	}
	s, sub = validRunes(s), validRunes(sub)
	runes := int64(utf8.RuneCountInString(s))
	if sub == "" {
		return types.Int(min(off, runes))
	}
	if off >= runes {
		return types.Int(-1)
	}
	b := runeOffset(s, off)
	i := strings.Index(s[b:], sub)
	if i < 0 {
		return types.Int(-1)
	}
	return types.Int(off + int64(utf8.RuneCountInString(s[b:b+i])))
}

// lastIndexOf returns the index (in runes) of the last occurrence of sub
// in s that starts at or before rune off, -1 if none: the strings
// extension's lastIndexOf with an offset.
func lastIndexOf(s, sub string, off int64) ref.Val {
	if off < 0 {
		return types.NewErr("index out of range: %d", off)
	}
	s, sub = validRunes(s), validRunes(sub)
	runes, subRunes := int64(utf8.RuneCountInString(s)), int64(utf8.RuneCountInString(sub))
	if sub == "" {
		return types.Int(min(off, runes))
	}
	if off >= runes {
		return types.Int(-1)
	}
	off = min(off, runes-subRunes)
	if off < 0 {
		return types.Int(-1)
	}
	end := min(runeOffset(s, off)+len(sub), len(s))
	i := strings.LastIndex(s[:end], sub)
	if i < 0 {
		return types.Int(-1)
	}
	return types.Int(utf8.RuneCountInString(s[:i]))
}

// errTimeLimit is the error of an evaluation stopped at MaxEvalTime.
var errTimeLimit = fmt.Errorf("time limit exceeded: the expression ran longer than %v (MaxEvalTime) on this object", MaxEvalTime)

// errCostLimit is the error of an evaluation stopped at CostLimit.
var errCostLimit = fmt.Errorf("cost limit exceeded: the expression cost more than %d units (CostLimit) on this object", CostLimit)

// evalMetered evaluates a metered program, one with loops within
// MaxEvalTime (only loops can be interrupted), turning cel-go's errors for
// the two limits into errTimeLimit and errCostLimit.
func evalMetered(prg cel.Program, vars *celVars, loops bool) (ref.Val, error) {
	var out ref.Val
	var err error
	if loops {
		out, _, err = prg.ContextEval(evalContext(), vars)
	} else {
		out, _, err = prg.Eval(vars)
	}
	var cancelled interpreter.EvalCancelledError
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		return nil, errTimeLimit
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
		return nil, errCostLimit
	}
	return out, err
}

// unmeteredOptions are the program options of an unmetered expression:
// its match of a constant pattern, if any, is refused when it alone would
// cost more than CostLimit.
func unmeteredOptions() []cel.ProgramOption {
	costs := &celCosts{patterns: map[string]int{}}
	return []cel.ProgramOption{cel.OptimizeRegex(costs.regexOptimizations()...)}
}

// evalEpoch is a context shared by the evaluations that start within
// epochLength of its start, done MaxEvalTime plus epochLength after it: a
// timer per evaluation cost a third of a short loop's time
// (BenchmarkEvalCELMetered10), one per epoch costs nothing measurable.
type evalEpoch struct {
	start  time.Time
	ctx    context.Context
	cancel context.CancelFunc // called by its deadline
}

// epochLength is how long one evalEpoch serves new evaluations.
const epochLength = MaxEvalTime / 10

var evalEpochs atomic.Pointer[evalEpoch]

// evalContext returns a context done between MaxEvalTime and MaxEvalTime
// plus epochLength from now.
func evalContext() context.Context {
	now := time.Now()
	for {
		e := evalEpochs.Load()
		if e != nil && now.Sub(e.start) < epochLength {
			return e.ctx
		}
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(MaxEvalTime+epochLength))
		if evalEpochs.CompareAndSwap(e, &evalEpoch{start: now, ctx: ctx, cancel: cancel}) {
			return ctx
		}
		cancel() // another evaluation started an epoch: use it
	}
}

// meteredOptions are the program options of a metered expression: the
// cost limit, its cost model and, with loops, their interruption at
// MaxEvalTime.
func meteredOptions(loops bool) []cel.ProgramOption {
	costs := &celCosts{patterns: map[string]int{}}
	opts := []cel.ProgramOption{
		cel.CostLimit(CostLimit), cel.CostTracking(costs),
		cel.CustomDecoratorV2(decMatches), cel.OptimizeRegex(costs.regexOptimizations()...),
	}
	if loops {
		opts = append(opts, cel.InterruptCheckFrequency(interruptEvery))
	}
	return opts
}
