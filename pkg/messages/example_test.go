package messages_test

import (
	"encoding/json"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A producer in another service builds a job in code and publishes its JSON
// on the submit subject; it needs this package only. (Package jobspec
// validates a spec, as the coordinator does when the job arrives.)
func ExampleJobSpec() {
	attempts := 5
	spec := messages.JobSpec{
		ID:    "thumbs",
		Items: []json.RawMessage{json.RawMessage(`{"id":"a","path":"a.jpg"}`)},
		AgentTemplate: []messages.Step{{
			Shell:   "convert ${item.path} out/${item.id}.png",
			Timeout: messages.MustDuration("2m30s"),
			RetryConfig: &messages.RetryConfig{
				Attempts: &attempts,
				Backoff:  &messages.Backoff{Kind: messages.BackoffExponential, Base: 3},
				RetryOn:  []messages.Matcher{{Builtin: messages.MatchNetwork}, {ExitCodes: []int{75}}},
			},
		}},
		RetryBudget: &messages.BudgetValue{Percent: 10, IsPercent: true},
	}
	data, _ := json.Marshal(spec)
	fmt.Println(messages.MustNames("").JobsSubmitSubject())
	fmt.Println(string(data))
	// Output:
	// fleet.jobs.submit
	// {"id":"thumbs","items":[{"id":"a","path":"a.jpg"}],"agent_template":[{"shell":"convert ${item.path} out/${item.id}.png","timeout":"2m30s","retry_config":{"attempts":5,"backoff":{"exponential":{"base":3}},"retry_on":["network",{"exit_code":[75]}]}}],"retry_budget":"10%"}
}

func ExampleParseDuration() {
	for _, s := range []string{"500ms", "2m30s", "90m", "1.5s", "1d"} {
		d, _ := messages.ParseDuration(s)
		fmt.Println(s, "=", d.D(), "written", d)
	}
	_, err := messages.ParseDuration("5 seconds")
	fmt.Println(err)
	// Output:
	// 500ms = 500ms written 500ms
	// 2m30s = 2m30s written 2m30s
	// 90m = 1h30m0s written 1h30m
	// 1.5s = 1.5s written 1s500ms
	// 1d = 24h0m0s written 1d
	// invalid duration "5 seconds": unknown unit "seconds" (use ns, us, ms, s, m, h, d or w, e.g. "30s")
}

// Polymorphic values marshal to their canonical form: the shorthand name
// when they have no parameters, else a one-key object.
func ExampleBackoff_MarshalJSON() {
	for _, b := range []messages.Backoff{
		{Kind: messages.BackoffFixed},
		{Kind: messages.BackoffExponential, Base: 2, Initial: new(messages.MustDuration("1s"))},
	} {
		out, _ := json.Marshal(b)
		fmt.Println(string(out))
	}
	// Output:
	// "fixed"
	// {"exponential":{"base":2,"initial":"1s"}}
}
