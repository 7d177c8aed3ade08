package rollout

import (
	"encoding/json"
	"iter"
	"slices"
	"time"
)

// layerChunk is how many layers a chunk of Layers holds.
const layerChunk = 64

// Layers is a view's layers, in order. A published view never changes, so
// each evaluation makes a new one; successive views of a rollout share the
// chunks whose layers did not change, so that an event that moves one
// layer of a thousand copies one chunk instead of every layer (the copy
// was nearly all of what a wide rollout's evaluation allocated). It
// encodes as a JSON array.
type Layers struct {
	chunks [][]LayerView // each of layerChunk layers, the last one of the rest
	n      int
}

// MakeLayers returns layers holding ls, which they own from then on: ls
// must not change. Its chunks are runs of ls, so that Shared can hand out
// ls itself.
func MakeLayers(ls []LayerView) Layers {
	out := Layers{n: len(ls)}
	for lo := 0; lo < len(ls); lo += layerChunk {
		out.chunks = append(out.chunks, ls[lo:min(len(ls), lo+layerChunk)])
	}
	return out
}

// with returns n layers, the i-th being at(i), sharing each of l's chunks
// that holds the same layers over the same range.
func (l Layers) with(n int, at func(int) LayerView) Layers {
	out := Layers{n: n}
	if n == 0 {
		return out
	}
	out.chunks = make([][]LayerView, (n+layerChunk-1)/layerChunk)
	for c := range out.chunks {
		lo, hi := c*layerChunk, min(n, (c+1)*layerChunk)
		if c < len(l.chunks) && len(l.chunks[c]) == hi-lo {
			old, same := l.chunks[c], true
			for i := lo; i < hi && same; i++ {
				same = sameLayer(old[i-lo], at(i))
			}
			if same {
				out.chunks[c] = old
				continue
			}
		}
		ch := make([]LayerView, hi-lo)
		for i := lo; i < hi; i++ {
			ch[i-lo] = at(i)
		}
		out.chunks[c] = ch
	}
	return out
}

// patch returns l with the layers at the indexes in changed replaced by
// at(i), copying only the chunks where a layer differs: a view whose
// rollout moved one layer costs one chunk, whatever its width.
func (l Layers) patch(changed []int, at func(int) LayerView) Layers {
	out := l
	for _, i := range changed {
		c, lv := i/layerChunk, at(i)
		if sameLayer(out.chunks[c][i%layerChunk], lv) {
			continue
		}
		if &out.chunks[0] == &l.chunks[0] {
			out.chunks = slices.Clone(l.chunks)
		}
		if &out.chunks[c][0] == &l.chunks[c][0] {
			out.chunks[c] = slices.Clone(l.chunks[c])
		}
		out.chunks[c][i%layerChunk] = lv
	}
	return out
}

func sameLayer(a, b LayerView) bool {
	return a.Name == b.Name && a.State == b.State && a.Revision == b.Revision && a.Reason == b.Reason && a.Message == b.Message &&
		sameTime(a.At, b.At) && sameTime(a.Since, b.Since) && sameTime(a.Healthy, b.Healthy) && slices.Equal(a.DependsOn, b.DependsOn) &&
		slices.EqualFunc(a.Releases, b.Releases, sameRelease)
}

func sameRelease(a, b ReleaseView) bool {
	return a.Kind == b.Kind && a.Namespace == b.Namespace && a.Name == b.Name && a.State == b.State && a.Reason == b.Reason &&
		a.Message == b.Message && sameTime(a.At, b.At) && a.Since.Equal(b.Since)
}

func sameTime(a, b *time.Time) bool {
	return a == b || a != nil && b != nil && a.Equal(*b)
}

// Len is the number of layers.
func (l Layers) Len() int { return l.n }

// At returns the i-th layer.
func (l Layers) At(i int) LayerView { return l.chunks[i/layerChunk][i%layerChunk] }

// All yields the layers in order.
func (l Layers) All() iter.Seq2[int, LayerView] {
	return func(yield func(int, LayerView) bool) {
		for i := range l.n {
			if !yield(i, l.At(i)) {
				return
			}
		}
	}
}

// Slice returns a copy of the layers.
func (l Layers) Slice() []LayerView {
	out := make([]LayerView, l.n)
	for i := range out {
		out[i] = l.At(i)
	}
	return out
}

func (l Layers) MarshalJSON() ([]byte, error) { return json.Marshal(l.Slice()) }

func (l *Layers) UnmarshalJSON(b []byte) error {
	var ls []LayerView
	if err := json.Unmarshal(b, &ls); err != nil {
		return err
	}
	*l = MakeLayers(ls)
	return nil
}
