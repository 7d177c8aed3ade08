package flux

import (
	"regexp"
	"strings"
)

// PruneObject is one object Flux failed to delete, as named in a PruneFailed
// message.
type PruneObject struct {
	Kind      string
	Namespace string // empty for cluster-scoped objects
	Name      string
	Error     string // Flux's error text for this object, without the object's own name
}

// prunePrefix opens the error fluxcd/pkg/ssa DeleteAll returns; each failed
// object follows as "<Kind>/<ns>/<name> <op> failed: <err>;" (cluster-scoped:
// "<Kind>/<name>"), with no separator but the ';'.
const prunePrefix = "delete failed, errors: "

// pruneEntry finds where each object's entry starts. Kubernetes names never
// contain '/', ';' or spaces, so an entry start cannot hide inside a name;
// error texts could in theory contain one, and then the split is at worst
// one object too many, never one too few.
var pruneEntry = regexp.MustCompile(`(?:^|;)\s*([A-Za-z][A-Za-z0-9]*)/([^/\s;]+)(?:/([^/\s;]+))? (?:delete|query|label selector) failed: `)

// ParsePruneMessage returns the objects named in a PruneFailed message, in
// message order. A message that does not have Flux's shape yields nil.
func ParsePruneMessage(msg string) []PruneObject {
	i := strings.Index(msg, prunePrefix)
	if i < 0 {
		return nil
	}
	body := msg[i+len(prunePrefix):]
	locs := pruneEntry.FindAllStringSubmatchIndex(body, -1)
	if len(locs) == 0 {
		return nil
	}
	objs := make([]PruneObject, 0, len(locs))
	for k, loc := range locs {
		end := len(body)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		o := PruneObject{Kind: body[loc[2]:loc[3]]}
		if loc[6] >= 0 {
			o.Namespace, o.Name = body[loc[4]:loc[5]], body[loc[6]:loc[7]]
		} else {
			o.Name = body[loc[4]:loc[5]]
		}
		o.Error = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body[loc[1]:end]), ";"))
		objs = append(objs, o)
	}
	return objs
}
