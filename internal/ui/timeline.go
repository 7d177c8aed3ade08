package ui

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// timeline is a rollout drawn as rows of bars, one per expected layer,
// computed here so that the template only places what it is given.
type timeline struct {
	Width, Height int
	Left          int // where time starts, after the layer names
	Rows          []timelineRow
	Ticks         []timelineTick
	Now           *float64 // the "now" line while the rollout is live
}

type timelineRow struct {
	Y      int
	Name   string
	State  string
	Bar    bool // false: the layer has not reported (pending)
	X, W   float64
	Marks  []timelineMark
	Detail string // the bar's tooltip
}

type timelineMark struct {
	X, Y  float64
	Kind  string // failed, health (a failed health check), passed (health checks passed)
	Title string
}

type timelineTick struct {
	X      float64
	Label  string
	Anchor string // text-anchor: the first and last labels stay inside
}

const (
	tlWidth  = 960
	tlLeft   = 260
	tlRow    = 22
	tlTop    = 24
	tlMinBar = 3
)

// newTimeline lays out v's layers in dependsOn order: when the cluster
// told what each depends on, no layer comes before one it depends on;
// otherwise, and among layers free to go, in the order Flux took them,
// which follows dependsOn: those that finished by when they finished, then
// those still at it by when they began (a dependent reports
// DependencyNotReady before its dependency starts, so beginnings alone
// would put it first), then those that have not reported. Time runs from
// the rollout's first evidence to its completion, or to now while it is
// live.
func newTimeline(v *rollout.View, now time.Time) timeline {
	layers := v.Layers.Slice()
	rank := func(l rollout.LayerView) (int, time.Time) {
		switch {
		case l.Since == nil:
			return 2, time.Time{}
		case finished(l):
			return 0, *l.At
		}
		return 1, *l.Since
	}
	slices.SortStableFunc(layers, func(a, b rollout.LayerView) int {
		ra, ta := rank(a)
		rb, tb := rank(b)
		if c := cmp.Compare(ra, rb); c != 0 {
			return c
		}
		if c := ta.Compare(tb); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	layers = dependsOnOrder(layers)
	start, end := v.FirstSeen, v.LastSeen
	if v.CompletedAt != nil && v.CompletedAt.After(end) {
		end = *v.CompletedAt
	}
	live := !v.Terminal
	if live && now.After(end) {
		end = now
	}
	for _, l := range layers {
		for _, rv := range l.Releases {
			if rv.At != nil && rv.At.After(end) {
				end = *rv.At
			}
		}
		for _, t := range []*time.Time{l.Since, l.At, l.Healthy} {
			if t != nil && t.Before(start) {
				start = *t
			}
			if t != nil && t.After(end) {
				end = *t
			}
		}
	}
	span := end.Sub(start)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 {
		return tlLeft + float64(t.Sub(start))/float64(span)*(tlWidth-tlLeft-8)
	}
	rows := len(layers)
	for _, l := range layers {
		rows += len(l.Releases)
	}
	tl := timeline{Width: tlWidth, Left: tlLeft, Height: tlTop + rows*tlRow + 8}
	// A release's failures are drawn on its own row, under its layer's.
	type rowKey struct {
		layer   string
		release rollout.Ref // zero: the layer's own
	}
	failures := map[rowKey][]rollout.FailureView{}
	for _, f := range v.Failures {
		k := rowKey{f.Layer, f.Release}
		failures[k] = append(failures[k], f)
	}
	i := 0
	for _, l := range layers {
		row := timelineRow{Y: tlTop + i*tlRow, Name: l.Name, State: string(l.State)}
		i++
		if l.Since != nil {
			row.Bar = true
			to := end // still at it: up to now, or to the end of a final rollout
			if finished(l) {
				to = *l.At
			}
			row.X, row.W = x(*l.Since), max(x(to)-x(*l.Since), tlMinBar)
			row.Detail = l.Name + ": " + string(l.State) + " " + l.Reason + " " + since(to.Sub(*l.Since))
		}
		if l.Healthy != nil {
			row.Marks = append(row.Marks, timelineMark{X: x(*l.Healthy), Y: float64(row.Y) + 8, Kind: "passed", Title: "health checks passed"})
		}
		for _, f := range failures[rowKey{l.Name, rollout.Ref{}}] {
			kind := "failed"
			if f.Class == rollout.FailureHealth {
				kind = "health"
			}
			row.Marks = append(row.Marks, timelineMark{X: x(f.At), Y: float64(row.Y) + 8, Kind: kind, Title: f.Reason + ": " + f.Message})
		}
		tl.Rows = append(tl.Rows, row)
		for _, rv := range l.Releases {
			name := rv.Object()
			rr := timelineRow{Y: tlTop + i*tlRow, Name: "↳ " + rv.Namespace + "/" + rv.Name, State: string(rv.State), Bar: true}
			i++
			to := end
			if rv.At != nil && rv.State != rollout.LayerProgressing && rv.State != rollout.LayerWaiting {
				to = *rv.At
			}
			rr.X, rr.W = x(rv.Since), max(x(to)-x(rv.Since), tlMinBar)
			rr.Detail = name + ": " + string(rv.State) + " " + rv.Reason + " " + since(to.Sub(rv.Since))
			for _, f := range failures[rowKey{l.Name, rv.Ref()}] {
				title := f.Reason + ": " + f.Message
				if f.Remediation != "" {
					title += "; then: " + f.Remediation
				}
				rr.Marks = append(rr.Marks, timelineMark{X: x(f.At), Y: float64(rr.Y) + 8, Kind: "failed", Title: title})
			}
			tl.Rows = append(tl.Rows, rr)
		}
	}
	for i := range 5 {
		t := start.Add(span * time.Duration(i) / 4)
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		tl.Ticks = append(tl.Ticks, timelineTick{X: x(t), Label: "+" + since(t.Sub(start)), Anchor: anchor})
	}
	if live {
		n := x(now)
		tl.Now = &n
	}
	return tl
}

// since prints a duration the way people read one on a page.
func since(d time.Duration) string {
	switch {
	case d < time.Hour:
		return max(d, 0).Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// finished reports whether a layer is done with the revision: applied,
// failed or left for a newer one.
func finished(l rollout.LayerView) bool {
	return l.At != nil && l.State != rollout.LayerProgressing && l.State != rollout.LayerWaiting && l.State != rollout.LayerPending
}

// dependsOnOrder reorders layers so that none comes before a layer of the
// list it depends on, keeping the given order wherever dependsOn allows
// (and for a cycle, which Flux would refuse anyway).
func dependsOnOrder(layers []rollout.LayerView) []rollout.LayerView {
	in := map[string]bool{}
	known := false
	for _, l := range layers {
		in[l.Name] = true
		known = known || len(l.DependsOn) > 0
	}
	if !known {
		return layers
	}
	placed := map[string]bool{}
	out := make([]rollout.LayerView, 0, len(layers))
	rest := slices.Clone(layers)
	for len(rest) > 0 {
		next := 0 // a cycle: take the first
		for i, l := range rest {
			if !slices.ContainsFunc(l.DependsOn, func(d string) bool { return in[d] && !placed[d] }) {
				next = i
				break
			}
		}
		placed[rest[next].Name] = true
		out = append(out, rest[next])
		rest = slices.Delete(rest, next, next+1)
	}
	return out
}
