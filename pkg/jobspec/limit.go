package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// decodeRateHook reads a rate: "40/s", "600/m", "1000/h", or a bare
// number of calls per second.
func decodeRateHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var r messages.Rate
	switch x := v.(type) {
	case string:
		p, err := messages.ParseRate(x)
		if err != nil {
			d.addf(path, "%v", err)
			return false
		}
		r = p
	case json.Number:
		f, err := jsonnode.AsFloat(x)
		if err != nil || f <= 0 || f > messages.MaxRate {
			d.addf(path, "want a positive rate up to %g/s, e.g. \"40/s\", got %s", float64(messages.MaxRate), x)
			return false
		}
		r = messages.Rate(f)
	default:
		d.typeErr(path, `a rate such as "40/s", "600/m" or "1000/h"`, v)
		return false
	}
	rv.Set(reflect.ValueOf(r))
	return true
}

// decodeStepLimitHook reads a step's limit: a named limit's name, or the
// inline form {key, rate, burst, concurrency, adaptive}.
func decodeStepLimitHook(d *decoder, path string, v any, rv reflect.Value) bool {
	var l messages.StepLimit
	switch x := v.(type) {
	case string:
		l.Name = x
	case map[string]any:
		var p struct {
			Key         string        `json:"key"`
			Rate        messages.Rate `json:"rate"`
			Burst       int           `json:"burst"`
			Concurrency int           `json:"concurrency"`
			Adaptive    bool          `json:"adaptive"`
		}
		n := len(d.problems)
		d.object(path, x, reflect.ValueOf(&p).Elem())
		if len(d.problems) > n {
			return false
		}
		l = messages.StepLimit{Key: p.Key, LimitConfig: messages.LimitConfig{Rate: p.Rate, Burst: p.Burst, Concurrency: p.Concurrency, Adaptive: p.Adaptive}}
	default:
		d.typeErr(path, `a limit's name or {key: "...", rate: "40/s", concurrency: 6}`, v)
		return false
	}
	rv.Set(reflect.ValueOf(l))
	return true
}

// limit checks a step's limit at path p.
func (v *validator) limit(p string, l *messages.StepLimit) {
	if l.Key == "" && l.LimitConfig == (messages.LimitConfig{}) {
		if err := messages.ValidLimitName(l.Name); err != nil {
			v.addf(p, "limit name %q: %v", l.Name, err)
		}
		return
	}
	kp := messages.JoinPath(p, "key")
	if strings.TrimSpace(l.Key) == "" {
		v.addf(kp, `an inline limit needs a key, e.g. "api:${item.host}"`)
	} else if t, err := wire.ParseTemplate(l.Key); err != nil {
		v.addf(kp, "%v", err)
	} else {
		for _, part := range t.Parts {
			if r := part.Ref; r != nil && r[0] != wire.RefItem && r[0] != wire.RefItemID && r[0] != wire.RefJobID {
				v.addf(kp, "${%s} is not allowed in a limit's key (use ${item.<field>}, ${item_id} or ${job_id})", strings.Join(r, "."))
				break
			}
		}
		if len(l.Key) > messages.MaxLimitKeyBytes {
			v.addf(kp, "at most %d bytes, got %d", messages.MaxLimitKeyBytes, len(l.Key))
		}
	}
	for _, fe := range l.LimitConfig.Validate(p) {
		v.addf(fe.Field, "%s", fe.Message)
	}
}
