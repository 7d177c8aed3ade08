package rollout

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

func someLayers(n int, state LayerState) []LayerView {
	out := make([]LayerView, n)
	for i := range out {
		at := mt0.Add(time.Duration(i) * time.Second)
		out[i] = LayerView{Name: fmt.Sprintf("flux-system/l%04d", i), State: state, Revision: "main@sha1:abc", At: &at}
	}
	return out
}

// TestLayersShareUnchangedChunks: a view's layers reuse the chunks of the
// one before that hold the same layers (by value: a fresh pointer to the
// same time is the same), copy the chunks that changed, and never carry
// layers beyond their length.
func TestLayersShareUnchangedChunks(t *testing.T) {
	ls := someLayers(3*layerChunk+5, LayerProgressing)
	prev := MakeLayers(ls)
	moved := make([]LayerView, len(ls))
	copy(moved, ls)
	at := *ls[1].At
	moved[1].At = &at // same time, another pointer
	moved[2*layerChunk+3].State = LayerApplied
	next := prev.with(len(moved), func(i int) LayerView { return moved[i] })
	for c, want := range []bool{true, true, false, true} {
		if shared := &next.chunks[c][0] == &prev.chunks[c][0]; shared != want {
			t.Errorf("chunk %d shared %v, want %v", c, shared, want)
		}
	}
	if !reflect.DeepEqual(next.Slice(), moved) || next.At(2*layerChunk+3).State != LayerApplied {
		t.Fatalf("layers do not hold what they were made of")
	}
	if prev.At(2*layerChunk+3).State != LayerProgressing {
		t.Fatal("the earlier view's layers changed")
	}
	// Fewer layers: the last chunk is not the old one, which holds more.
	shorter := prev.with(len(ls)-2, func(i int) LayerView { return ls[i] })
	if &shorter.chunks[3][0] == &prev.chunks[3][0] || !reflect.DeepEqual(shorter, MakeLayers(ls[:len(ls)-2])) {
		t.Fatal("a shorter list kept the old last chunk")
	}
}

// TestLayersPatch: patching copies only the chunks where a layer changed
// (the others, and a layer read again unchanged, stay shared), and never
// changes the layers it was made from, which a published view holds.
func TestLayersPatch(t *testing.T) {
	ls := someLayers(3*layerChunk+5, LayerProgressing)
	prev := MakeLayers(ls)
	moved := slices.Clone(ls)
	moved[2*layerChunk+3].State = LayerApplied
	moved[3*layerChunk+4].State = LayerFailed
	at := func(i int) LayerView { return moved[i] }
	next := prev.patch([]int{1, 2*layerChunk + 3, 3*layerChunk + 4}, at)
	for c, want := range []bool{true, true, false, false} {
		if shared := &next.chunks[c][0] == &prev.chunks[c][0]; shared != want {
			t.Errorf("chunk %d shared %v, want %v", c, shared, want)
		}
	}
	if !reflect.DeepEqual(next.Slice(), moved) {
		t.Fatal("patched layers do not hold the changed ones")
	}
	if !reflect.DeepEqual(prev.Slice(), ls) || ls[2*layerChunk+3].State != LayerProgressing {
		t.Fatal("the earlier view's layers changed")
	}
	if same := prev.patch([]int{0, 1}, func(i int) LayerView { return ls[i] }); &same.chunks[0] != &prev.chunks[0] {
		t.Fatal("layers read again unchanged were copied")
	}
}

// TestLayersJSON: the layers encode as the array of LayerView they hold.
func TestLayersJSON(t *testing.T) {
	for _, n := range []int{0, 1, layerChunk, 2*layerChunk + 1} {
		ls := someLayers(n, LayerApplied)
		want, _ := json.Marshal(ls)
		got, err := json.Marshal(MakeLayers(ls))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%d layers encode as %s (%v), want %s", n, got, err, want)
		}
		var back Layers
		if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, MakeLayers(ls)) {
			t.Fatalf("%d layers decode to %+v (%v)", n, back, err)
		}
	}
}

// TestSameLayerSeesEveryField: a chunk is shared only when its layers are
// the same in every field, so a field added to LayerView that sameLayer
// does not compare would let a view show a layer's old state. Each field
// changed alone must make the layers differ.
func TestSameLayerSeesEveryField(t *testing.T) {
	at, later := mt0, mt0.Add(time.Second)
	base := LayerView{Name: "flux-system/apps", State: LayerProgressing, Revision: "main@sha1:abc", Reason: "Progressing",
		Message: "m", At: &at, Since: &at, Healthy: &at, DependsOn: []string{"flux-system/infra"}}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString(f.String() + "x")
		case LayerState:
			f.Set(reflect.ValueOf(LayerApplied))
		case *time.Time:
			f.Set(reflect.ValueOf(&later))
		case []string:
			f.Set(reflect.ValueOf([]string{"flux-system/platform"}))
		case []ReleaseView:
			f.Set(reflect.ValueOf([]ReleaseView{{Kind: "HelmRelease", Namespace: "apps", Name: "web", State: LayerPending, Since: at}}))
		default:
			t.Fatalf("field %s of type %s: teach this test (and sameLayer) to change it", typ.Field(i).Name, f.Type())
		}
		if sameLayer(base, changed) {
			t.Errorf("sameLayer does not see a change of %s", typ.Field(i).Name)
		}
	}
}
