package rollout

import (
	"slices"
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
