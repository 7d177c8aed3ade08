package flux

import "testing"

// TestParseRemediation reads helm-controller's remediation reports in the
// words of its reconcile package (v1.6.4: fmtRollbackRemediation* and
// fmtUninstallRemediation*, a failure's message followed by Helm's logs),
// and takes nothing else for one.
func TestParseRemediation(t *testing.T) {
	for _, tt := range []struct {
		reason, msg string
		want        Remediation
		ok          bool
	}{
		{ReasonRollbackSucceeded, "Helm rollback to previous release apps/web.v3 with chart web@1.0.0 succeeded",
			Remediation{Rollback: true, Version: 3}, true},
		{ReasonRollbackFailed, "Helm rollback to previous release apps/web.v12 with chart web@1.0.0+0123456789ab failed: timed out waiting for the condition\n\nLast Helm logs:\n\nwaiting",
			Remediation{Rollback: true, Failed: true, Version: 12, Error: "timed out waiting for the condition"}, true},
		{ReasonUninstallSucceeded, "Helm uninstall remediation for release apps/web.v1 with chart web@1.0.0 succeeded",
			Remediation{Version: 1}, true},
		{ReasonUninstallFailed, "Helm uninstall remediation for release apps/my.v2.app.v7 with chart web@2.0.0 failed: uninstall: Release not loaded: web: release: not found",
			Remediation{Failed: true, Version: 7, Error: "uninstall: Release not loaded: web: release: not found"}, true},
		// A release name without a version: a remediation all the same.
		{ReasonRollbackSucceeded, "Helm rollback to previous release apps/web with chart web@1.0.0 succeeded", Remediation{Rollback: true}, true},
		// The HelmRelease deleted: a plain uninstall, no remediation.
		{ReasonUninstallSucceeded, "Helm uninstall succeeded for release apps/web.v1 with chart web@1.0.0", Remediation{}, false},
		{ReasonUpgradeFailed, "Helm rollback to previous release apps/web.v3 with chart web@1.0.0 succeeded", Remediation{}, false},
		{ReasonRollbackSucceeded, "rolled back", Remediation{}, false},
	} {
		got, ok := ParseRemediation(tt.reason, tt.msg)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRemediation(%s, %q) = %+v, %v; want %+v, %v", tt.reason, tt.msg, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRemediation(f *testing.F) {
	f.Add(ReasonRollbackFailed, "Helm rollback to previous release apps/web.v3 with chart web@1.0.0 failed: x\ny")
	f.Add(ReasonUninstallSucceeded, "Helm uninstall remediation for release a.v with chart  succeeded")
	f.Fuzz(func(t *testing.T, reason, msg string) {
		r, ok := ParseRemediation(reason, msg)
		if !ok && r != (Remediation{}) || r.Version < 0 || len(r.Error) > len(msg) {
			t.Fatalf("ParseRemediation(%q, %q) = %+v, %v", reason, msg, r, ok)
		}
	})
}
