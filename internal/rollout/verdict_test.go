package rollout

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestVerdicts: the list the status pages and the metrics use has every
// verdict a rollout can have, unknown alone left out.
func TestVerdicts(t *testing.T) {
	var names []string
	for _, v := range Verdicts() {
		names = append(names, v.String())
	}
	if want := verdictNames[1:]; !slices.Equal(names, want) {
		t.Fatalf("Verdicts() = %q, want %q", names, want)
	}
}

// TestRefText: a view's source reads and writes as Kind/namespace/name,
// in JSON too, and nothing else reads as one.
func TestRefText(t *testing.T) {
	r := Ref{"OCIRepository", "flux-system", "apps"}
	b, err := json.Marshal(View{Source: r})
	if err != nil || !strings.Contains(string(b), `"source":"OCIRepository/flux-system/apps"`) {
		t.Fatalf("%s %v", b, err)
	}
	var v View
	if err := json.Unmarshal(b, &v); err != nil || v.Source != r {
		t.Fatalf("read back %+v %v", v.Source, err)
	}
	if b, _ := json.Marshal(View{}); strings.Contains(string(b), `"source"`) {
		t.Errorf("no source written as %s", b)
	}
	for _, bad := range []string{"apps", "GitRepository/apps", "/ns/name", "Kind/ns/", "Kind/ns/a/b"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("%q read as a Ref", bad)
		}
	}
	if got, err := ParseRef(""); err != nil || got != (Ref{}) || got.String() != "" {
		t.Errorf("none: %+v %v", got, err)
	}
}
