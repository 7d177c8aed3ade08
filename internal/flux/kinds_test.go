package flux

import (
	"reflect"
	"testing"
)

// TestEverySourceKindIsCached: each source kind the reader watches is
// cached in Flux's type of that kind, and is known.
func TestEverySourceKindIsCached(t *testing.T) {
	for _, sk := range SourceKinds() {
		if src := sk.New(); reflect.TypeOf(src).Elem().Name() != sk.Kind {
			t.Errorf("a %s is cached as a %T", sk.Kind, src)
		}
		if !IsSource(sk.Kind) || !KnownKind(sk.Kind) {
			t.Errorf("%s is not a known source", sk.Kind)
		}
	}
	if IsSource(KindKustomization) || !KnownKind(KindKustomization) || !KnownKind("HelmRelease") || KnownKind("Deployment") {
		t.Error("the kinds are mixed up")
	}
}
