package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
)

// clusterLease is a registered cluster's lease as PostgreSQL has it.
type clusterLease struct {
	holder string
	epoch  int64
	live   bool
}

func clusterLeases(t *testing.T, conn string) map[string]clusterLease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `SELECT substr(name, 9), holder, epoch, expires > now() FROM fdn_leader WHERE name LIKE 'cluster/%'`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]clusterLease{}
	for rows.Next() {
		var (
			name string
			l    clusterLease
		)
		if err := rows.Scan(&name, &l.holder, &l.epoch, &l.live); err != nil {
			t.Fatal(err)
		}
		out[name] = l
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// holderOf is the replica whose identity (host/pid/random) a lease names.
func (r *replicas) holderOf(identity string) *child {
	for _, c := range r.alive() {
		if strings.Contains(identity, fmt.Sprintf("/%d/", c.cmd.Process.Pid)) {
			return c
		}
	}
	return nil
}

// layersApplied reports whether every layer of cluster shows hash applied
// on the replica at url.
func layersApplied(url, cluster, hash string, layers ...string) bool {
	var names []string
	for _, l := range layers {
		names = append(names, "flux-system/"+l)
	}
	return loadkit.LayersApplied(http.DefaultClient, url, cluster, hash, names...)
}

// TestClustersSharedAmongReplicas: three replicas on PostgreSQL share
// three registered clusters out, one each, each read by the replica that
// holds its lease alone (fdn_cluster_up names it there only); the leader
// tells each one's silence (no Alert sends their events), those it does
// not read counted by a census of their layers. The replica
// reading cluster a is killed (SIGKILL) mid-rollout: a's lease moves to
// another replica within the lease's time, in a new epoch, and a's
// rollout reaches its verdict from a's status, which changed while nobody
// read a. Every append of what a reader read was made by the replica
// holding the cluster's lease at that moment (a trigger of the test's
// records each with the lease it was checked against), so no cluster was
// read into the inbox by two replicas at once, and each epoch's appends
// are one replica's.
func TestClustersSharedAmongReplicas(t *testing.T) {
	hub, remote := clustertest.Start(t), clustertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	w := remote.NewWorld(t, "flux-system", now)
	rev1, rev2 := "main@sha1:"+strings.Repeat("3c", 20), "main@sha1:"+strings.Repeat("4d", 20)
	w.Source("fleet", rev1)
	layers := []string{"infra", "apps"}
	for _, l := range layers {
		w.Layer(clustertest.Layer{Name: l, Source: "fleet", Applied: rev1, Attempted: rev1,
			Ready: w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev1, time.Minute)})
	}
	kubeconfig, err := os.ReadFile(remote.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hub.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: fdn-hub}\n")
	names := []string{"a", "b", "c"} // three names for one API server: each its own rollouts
	for _, name := range names {
		registerCluster(t, hub, "fdn-hub", name, string(kubeconfig))
	}
	r := startReplicas(t, 0, "--lease-duration", "2s", "--lease-renew", "500ms", "--kubeconfig", hub.Kubeconfig,
		"--cluster-secrets-namespace", "fdn-hub", "--default-cluster", "hub", "--blind-after", "5s")
	r.start()
	r.leader(20 * time.Second) // the schema exists: the trigger goes in before the others start
	r.pg.Exec(t, r.conn, `CREATE TABLE test_appends (id bigint, cluster text, appender text, holder text, epoch bigint);
		CREATE FUNCTION test_append() RETURNS trigger AS $$
		BEGIN
			INSERT INTO test_appends SELECT NEW.id, o.cluster, current_setting('application_name'), l.holder, l.epoch
			FROM (SELECT convert_from(substring(NEW.body from 2), 'UTF8')::jsonb -> 0 ->> 'Cluster' AS cluster) o
			LEFT JOIN fdn_leader l ON l.name = 'cluster/' || o.cluster;
			RETURN NULL;
		END $$ LANGUAGE plpgsql;
		CREATE TRIGGER test_append AFTER INSERT ON fdn_inbox FOR EACH ROW WHEN (NOT NEW.event) EXECUTE FUNCTION test_append();`)
	r.start()
	r.start()

	// One cluster each, read there alone.
	var leases map[string]clusterLease
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		leases = clusterLeases(t, r.conn)
		holders := map[*child]bool{}
		for _, name := range names {
			if l := leases[name]; l.live && r.holderOf(l.holder) != nil {
				holders[r.holderOf(l.holder)] = true
			}
		}
		if len(holders) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clusters are not shared out one each: %+v", leases)
		}
	}
	for _, name := range names {
		holder := r.holderOf(leases[name].holder)
		for _, c := range r.alive() {
			want := ""
			if c == holder {
				want = "1"
			}
			for deadline := time.Now().Add(30 * time.Second); metric(t, c.url, `fdn_cluster_up{cluster="`+name+`"}`) != want; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("fdn_cluster_up{cluster=%q} on %s: %q, want %q (read by its holder alone)", name, c.url, metric(t, c.url, `fdn_cluster_up{cluster="`+name+`"}`), want)
				}
			}
		}
	}
	for _, name := range names {
		for deadline := time.Now().Add(30 * time.Second); !layersApplied(r.alive()[0].url, name, rev1[len("main@sha1:"):], layers...); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("cluster %s's first revision never shown from its state", name)
			}
		}
	}

	// No Alert sends their events: the leader tells each cluster blind,
	// counting the layers of those another replica reads by a census.
	awaitReadyz(t, r.leader(20*time.Second).url, "every registered cluster blind", func(_ int, warnings []string) bool {
		all := strings.Join(warnings, "\n")
		for _, name := range names {
			if !strings.Contains(all, "cluster "+name+": no event from notification-controller since") ||
				!strings.Contains(all, "while 2 layers exist") {
				return false
			}
		}
		return true
	})

	// Mid-rollout: infra applies rev2 while a is read, then a's reader
	// dies, then apps applies it while nobody reads a.
	w.SetStatus("infra", rev2, rev2, w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev2, 0))
	for deadline := time.Now().Add(30 * time.Second); !layersApplied(r.alive()[0].url, "a", rev2[len("main@sha1:"):], "infra"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's infra never shown applying the second revision")
		}
	}
	victim := r.holderOf(leases["a"].holder)
	_ = victim.cmd.Process.Kill() // the PID this test started
	r.out(victim, true)
	_ = victim.cmd.Wait()
	killed := time.Now()
	w.SetStatus("apps", rev2, rev2, w.Ready("True", "ReconciliationSucceeded", "Applied revision: "+rev2, 0))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l := clusterLeases(t, r.conn)["a"]
		if l.live && r.holderOf(l.holder) != nil {
			if l.epoch != leases["a"].epoch+1 {
				t.Fatalf("a taken over in epoch %d, want %d", l.epoch, leases["a"].epoch+1)
			}
			if d := time.Since(killed); d > 2*time.Second+5*500*time.Millisecond {
				t.Fatalf("a taken over %s after its reader died: more than the lease and a few rounds", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never taken over: %+v", l)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !layersApplied(r.alive()[0].url, "a", rev2[len("main@sha1:"):], layers...); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's rollout never reached every layer from a's status after the takeover")
		}
	}

	// Every reader's append, by the lease it was checked against.
	ctx := context.Background()
	c, err := pgx.Connect(ctx, r.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT cluster, epoch, holder, appender, count(*) FROM test_appends
		WHERE cluster IN ('a', 'b', 'c') GROUP BY 1, 2, 3, 4 ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	appenders := map[string]int{} // by cluster and epoch
	var successor int64
	for rows.Next() {
		var (
			cluster, holder, appender string
			epoch, n                  int64
		)
		if err := rows.Scan(&cluster, &epoch, &holder, &appender, &n); err != nil {
			t.Fatal(err)
		}
		if appender != "flux-deploy-notifier "+holder {
			t.Errorf("%d appends of cluster %s by %q under %s's lease (epoch %d)", n, cluster, appender, holder, epoch)
		}
		if appenders[fmt.Sprint(cluster, epoch)]++; appenders[fmt.Sprint(cluster, epoch)] > 1 {
			t.Errorf("cluster %s's epoch %d appended by more than one replica", cluster, epoch)
		}
		if cluster == "a" && epoch == leases["a"].epoch+1 {
			successor = n
		}
		t.Logf("cluster %s, epoch %d: %d appends by %s", cluster, epoch, n, holder)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if successor == 0 {
		t.Errorf("nothing appended of a in its successor's epoch %d: no catch-up", leases["a"].epoch+1)
	}
}
