package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"io/fs"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// The real table is valid, and lab.json and ports.json keep the keys their readers
// (tests/harness/src/info.rs, scripts) know, lab.json's in the same order.
func TestComponentTable(t *testing.T) {
	comps := (&lab{}).components()
	if err := checkTable(comps); err != nil {
		t.Fatal(err)
	}
	var keys, ports []string
	for _, c := range comps {
		if c.json != "" {
			keys = append(keys, c.json)
		}
		ports = append(ports, c.ports...)
	}
	if want := []string{"kubeconfig", "apiserver", "vcenter", "s3", "vcenterCa", "s3Tls"}; !slices.Equal(keys, want) {
		t.Errorf("lab.json keys %v, want %v", keys, want)
	}
	slices.Sort(ports)
	if want := []string{"apiserver", "etcdClient", "etcdPeer", "s3", "s3tls", "vcsim", "vcsimCA"}; !slices.Equal(ports, want) {
		t.Errorf("ports.json keys %v, want %v", ports, want)
	}
}

// With --kubevirt, KubeVirt's parts come right after the CRDs, its lab.json entry after the
// apiserver's, and the lab leaves KubeVirt's CRDs (not CDI's) to KubeVirt.
func TestComponentTableKubeVirt(t *testing.T) {
	comps := (&lab{kubevirt: true}).components()
	if err := checkTable(comps); err != nil {
		t.Fatal(err)
	}
	var names, keys, ports []string
	for _, c := range comps {
		names = append(names, c.name)
		if c.json != "" {
			keys = append(keys, c.json)
		}
		ports = append(ports, c.ports...)
	}
	i := slices.Index(names, "crds")
	if want := []string{"crds", "kubevirt", "virt-controller", "virt-api", "kubevirt-webhooks"}; i < 0 || !slices.Equal(names[i:i+5], want) {
		t.Errorf("components %v, want %v in a row", names, want)
	}
	if want := []string{"kubeconfig", "apiserver", "kubevirt", "vcenter", "s3", "vcenterCa", "s3Tls"}; !slices.Equal(keys, want) {
		t.Errorf("lab.json keys %v, want %v", keys, want)
	}
	slices.Sort(ports)
	if want := []string{"apiserver", "etcdClient", "etcdPeer", "s3", "s3tls", "vcsim", "vcsimCA", "virtApi", "virtController"}; !slices.Equal(ports, want) {
		t.Errorf("ports.json keys %v, want %v", ports, want)
	}
	owned := map[string]bool{}
	files, _ := fs.Glob(crdFS, "crds/*.yaml")
	for _, f := range files {
		b, _ := crdFS.ReadFile(f)
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(f, err)
		}
		owned[crd.Name] = kubevirtOwns(&crd)
	}
	for name, want := range map[string]bool{
		"virtualmachines.kubevirt.io": true, "virtualmachineinstances.kubevirt.io": true,
		"virtualmachineclusterinstancetypes.instancetype.kubevirt.io": true,
		"datavolumes.cdi.kubevirt.io":                                 false,
		"network-attachment-definitions.k8s.cni.cncf.io":              false,
	} {
		if got, ok := owned[name]; !ok || got != want {
			t.Errorf("kubevirtOwns(%s) = %v (found %v), want %v", name, got, ok, want)
		}
	}
}

func noStart(context.Context) (func(), error) { return nil, nil }

func TestCheckTableRejects(t *testing.T) {
	info := func() (any, error) { return 1, nil }
	for name, comps := range map[string][]*component{
		"later need":     {{name: "a", start: noStart, needs: []string{"b"}}, {name: "b", start: noStart}},
		"unknown need":   {{name: "a", start: noStart, needs: []string{"x"}}},
		"same name":      {{name: "a", start: noStart}, {name: "a", start: noStart}},
		"same port":      {{name: "a", start: noStart, ports: []string{"p"}}, {name: "b", start: noStart, ports: []string{"p"}}},
		"same json key":  {{name: "a", start: noStart, json: "k", info: info}, {name: "b", start: noStart, json: "k", info: info}},
		"reserved key":   {{name: "a", start: noStart, json: "pid", info: info}},
		"json sans info": {{name: "a", start: noStart, json: "k"}},
		"no start":       {{name: "a"}},
		"probe sans timeout": {{name: "a", start: noStart,
			ready: probe{every: time.Millisecond, check: func(context.Context) error { return nil }}}},
	} {
		if err := checkTable(comps); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestWaitReady(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "c.log")
	if err := os.WriteFile(logPath, []byte("first\nwhy it failed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := probe{what: "answers", timeout: 50 * time.Millisecond, every: time.Millisecond}

	calls := 0
	p.check = func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}
	if err := waitReady(ctx, "c", logPath, p); err != nil || calls != 3 {
		t.Errorf("ready on the third call: err %v after %d calls", err, calls)
	}

	p.check = func(context.Context) error { return errors.New("connection refused") }
	err := waitReady(ctx, "c", logPath, p)
	if err == nil || !strings.Contains(err.Error(), "c not ready within 50ms (answers): connection refused") ||
		!strings.Contains(err.Error(), "why it failed") {
		t.Errorf("timeout error lacks the last answer or the log tail: %v", err)
	}

	p.timeout = time.Hour
	started := time.Now()
	p.check = func(context.Context) error { return failed{errors.New("exited")} }
	if err := waitReady(ctx, "c", logPath, p); err == nil || !strings.Contains(err.Error(), "exited") ||
		time.Since(started) > time.Minute {
		t.Errorf("a failed probe should end the wait at once: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p.check = func(context.Context) error { return errors.New("not yet") }
	if err := waitReady(cctx, "c", logPath, p); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
}

// Components start after what they need and stop before it; a failed start fails the lab,
// starts nothing that needs it, and what did start is stopped.
func TestStartAndStopFollowNeeds(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	fake := func(name string, err error, needs ...string) *component {
		return &component{name: name, needs: needs, start: func(context.Context) (func(), error) {
			record("start " + name)
			return func() { record("stop " + name) }, err
		}}
	}
	index := func(e string) int { return slices.Index(events, e) }
	newLab := func(comps ...*component) *lab {
		return &lab{dir: t.TempDir(), comps: comps, fatal: make(chan error, 1), stops: map[string]func(){}}
	}

	l := newLab(fake("db", nil), fake("api", nil, "db"), fake("ctl", nil, "api"), fake("other", nil))
	if err := l.startComponents(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.stop()
	for _, before := range [][2]string{
		{"start db", "start api"}, {"start api", "start ctl"},
		{"stop ctl", "stop api"}, {"stop api", "stop db"},
	} {
		if i, j := index(before[0]), index(before[1]); i < 0 || j < 0 || i > j {
			t.Errorf("%q should come before %q: %v", before[0], before[1], events)
		}
	}
	if len(events) != 8 {
		t.Errorf("every component starts and stops once: %v", events)
	}

	events = nil
	l = newLab(fake("db", errors.New("disk full")), fake("api", nil, "db"), fake("other", nil))
	err := l.startComponents(context.Background())
	if err == nil || err.Error() != "db: disk full" {
		t.Errorf("start error: %v", err)
	}
	l.stop()
	if index("start api") >= 0 || index("stop db") < 0 || index("stop other") < 0 {
		t.Errorf("api must not start; db (half started) and other must stop: %v", events)
	}
}

// A restart keeps the recorded ports; a component added since gets a port of its own.
func TestAllocatePortsKeepsRecordedPorts(t *testing.T) {
	dir := t.TempDir()
	old, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, "ports.json"), map[string]int{"a": old}, 0o600); err != nil {
		t.Fatal(err)
	}
	l := &lab{dir: dir, comps: []*component{
		{name: "a", start: noStart, ports: []string{"a"}},
		{name: "b", start: noStart, ports: []string{"b1", "b2"}},
	}}
	if err := l.allocatePorts(); err != nil {
		t.Fatal(err)
	}
	if l.port("a") != old || l.port("b1") == 0 || l.port("b2") == 0 || l.port("b1") == l.port("b2") || l.port("b1") == old {
		t.Errorf("ports %v (a was %d)", l.ports, old)
	}
	var saved map[string]int
	b, _ := os.ReadFile(filepath.Join(dir, "ports.json"))
	if err := json.Unmarshal(b, &saved); err != nil || len(saved) != 3 || saved["b1"] != l.port("b1") {
		t.Errorf("ports.json %s (%v)", b, err)
	}
}

func TestLabJSONKeepsTableOrder(t *testing.T) {
	l := &lab{dir: t.TempDir()}
	entry := func(v any) func() (any, error) { return func() (any, error) { return v, nil } }
	l.comps = []*component{
		{name: "z", start: noStart, json: "zeta", info: entry("path")},
		{name: "n", start: noStart},
		{name: "a", start: noStart, json: "alpha", info: entry(struct {
			URL string `json:"url"`
		}{"https://x"})},
	}
	if err := l.writeLabJSON(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(l.dir, "lab.json"))
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i, j, k := strings.Index(s, `"stateDir"`), strings.Index(s, `"zeta": "path"`), strings.Index(s, `"alpha": {`); i < 0 || i > j || j > k {
		t.Errorf("lab.json out of table order:\n%s", b)
	}
	if got["alpha"].(map[string]any)["url"] != "https://x" || len(got) != 4 {
		t.Errorf("lab.json: %s", b)
	}
}

// Two labs started with different --context names write kubeconfigs that merge, as
// KUBECONFIG=a:b does, into two contexts, each with its own server and client certificate.
func TestKubeconfigsOfTwoLabsMerge(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := file("ca.crt", "CA")
	a, b := filepath.Join(dir, "a.kubeconfig"), filepath.Join(dir, "b.kubeconfig")
	if err := writeKubeconfig(a, defaultContext, "https://127.0.0.1:1001", ca, file("a.crt", "cert-a"), file("a.key", "key-a"), defaultContext+"-admin"); err != nil {
		t.Fatal(err)
	}
	if err := writeKubeconfig(b, "ferry-lab-b", "https://127.0.0.1:1002", ca, file("b.crt", "cert-b"), file("b.key", "key-b"), "ferry-lab-b-admin"); err != nil {
		t.Fatal(err)
	}
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: []string{a, b}}
	merged, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[string]struct{ server, cert string }{
		"ferry-lab":   {"https://127.0.0.1:1001", "cert-a"},
		"ferry-lab-b": {"https://127.0.0.1:1002", "cert-b"},
	} {
		c, ok := merged.Contexts[ctx]
		if !ok {
			t.Fatalf("context %s missing from the merged kubeconfig (contexts %v)", ctx, merged.Contexts)
		}
		if got := merged.Clusters[c.Cluster].Server; got != want.server {
			t.Errorf("%s: server %s, want %s", ctx, got, want.server)
		}
		if got := string(merged.AuthInfos[c.AuthInfo].ClientCertificateData); got != want.cert {
			t.Errorf("%s: client certificate %q, want %q", ctx, got, want.cert)
		}
	}
}
