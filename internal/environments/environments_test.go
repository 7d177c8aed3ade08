package environments_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/environments"
)

// TestParse: --environments in its order, environments with and without
// clusters, white space and empty parts forgiven; a cluster in two
// environments, a name twice or none refused.
func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"staging=stg-eu,stg-us;prod=prod-eu,prod-us", "[{staging [stg-eu stg-us]} {prod [prod-eu prod-us]}]", ""},
		{" dev = kind ; staging ; prod=prod-eu, ;", "[{dev [kind]} {staging []} {prod [prod-eu]}]", ""},
		{"", "[]", ""},
		{"staging=a;prod=a", "", "cluster a is in staging and prod"},
		{"prod=a;prod=b", "", "prod is declared twice"},
		{"=a", "", "names no environment"},
	} {
		got, err := environments.Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error naming %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tt.want && !(tt.want == "[]" && len(got) == 0) {
			t.Errorf("%q: %v (%v), want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestMap: a Secret's label places its cluster (over the declaration,
// with a warning), the declaration the others, a cluster in none is its
// own environment; the order is the declared one, then environments
// labels alone name (by name, with a warning), then clusters in none.
func TestMap(t *testing.T) {
	declared, err := environments.Parse("dev;staging=stg-eu,local;prod=prod-eu")
	if err != nil {
		t.Fatal(err)
	}
	m, warnings := environments.New(declared, map[string]string{
		"stg-us": "staging", "prod-eu": "production", "qa-1": "qa", "edge": "",
	})
	for cluster, want := range map[string]string{
		"stg-eu": "staging", "local": "staging", "stg-us": "staging", "prod-eu": "production", "qa-1": "qa", "edge": "edge", "lab": "lab",
	} {
		if got := m.Of(cluster); got != want {
			t.Errorf("%s in %s, want %s", cluster, got, want)
		}
	}
	if got := m.Order([]string{"lab", "qa-1", "prod-eu", "edge", "stg-us", "local"}); fmt.Sprint(got) != "[staging production qa edge lab]" {
		t.Errorf("order %v", got)
	}
	if got := fmt.Sprint(warnings); !strings.Contains(got, "cluster prod-eu: its Secret's label puts it in production, --environments in prod") ||
		!strings.Contains(got, "environment production is not in --environments") || !strings.Contains(got, "environment qa is not in --environments") || len(warnings) != 3 {
		t.Errorf("warnings %q", warnings)
	}
}
