package fieldmetrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

var errNil = errors.New("expected number but found nil value")

// toFloat64 converts a value of an object to a sample value as
// kube-state-metrics does (pkg/customresourcestate toFloat64): numbers as
// they are; true and false as 1 and 0; strings "true"/"yes" as 1,
// "false"/"no"/"unknown" as 0 (any case), an RFC 3339 timestamp as its
// Unix seconds, a quantity ("250m", "5Gi") as its approximate value, a
// percentage ("50%") as its fraction, and otherwise as a float; nil as 0
// with nilIsZero. Anything else is an error.
func toFloat64(value any, nilIsZero bool) (float64, error) {
	switch v := value.(type) {
	case nil:
		if nilIsZero {
			return 0, nil
		}
		return 0, errNil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	case string:
		return stringToFloat64(v)
	case int64:
		return float64(v), nil
	case float64:
		return v, nil
	case int:
		return float64(v), nil
	case int32:
		return float64(v), nil
	case uint64:
		return float64(v), nil
	case float32:
		return float64(v), nil
	}
	return 0, fmt.Errorf("expected number but was %v", value)
}

func stringToFloat64(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "true", "yes":
		return 1, nil
	case "false", "no", "unknown":
		return 0, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return float64(t.Unix()), nil
	}
	if q, err := resource.ParseQuantity(s); err == nil {
		return q.AsApproximateFloat64(), nil
	}
	if len(validation.IsValidPercent(s)) == 0 {
		f, err := strconv.ParseFloat(strings.TrimRight(s, "%"), 64)
		return f / 100, err
	}
	return strconv.ParseFloat(s, 64)
}

// labelValue formats a value of an object as a label value, as
// kube-state-metrics does (fmt's %v): strings as they are, numbers,
// booleans, maps and lists as fmt prints them.
func labelValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprintf("%v", v)
}
