package main

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vapi/tags"
)

// `ferry-lab tag` creates the category and tag once, attaches the tag to exactly the VMs named,
// and can be repeated; the REST API is served behind the lab's own handlers.
func TestTaggingVMsThroughTheRESTAPI(t *testing.T) {
	ctx := context.Background()
	model := simulator.VPX()
	defer model.Remove()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	model.Service.RegisterEndpoints = true
	srv := model.Service.NewServer()
	defer srv.Close()
	u := srv.URL
	srv.Config.Handler = folderAuth(model.Service.ServeMux, u.User.Username(), func() string { p, _ := u.User.Password(); return p }())
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		t.Fatal(err)
	}
	vms, err := find.NewFinder(c.Client, true).VirtualMachineList(ctx, "/DC0/vm/*")
	if err != nil || len(vms) < 3 {
		t.Fatalf("need 3 VMs: %v %v", vms, err)
	}
	names := []string{vms[0].Name(), vms[1].Name()}
	for i := 0; i < 2; i++ { // twice: idempotent
		if err := tagVMs(ctx, c, u.User, "tier", "gold", names); err != nil {
			t.Fatal(err)
		}
	}
	if err := tagVMs(ctx, c, u.User, "env", "gold", []string{vms[2].Name()}); err != nil {
		t.Fatal(err)
	}
	rc := rest.NewClient(c.Client)
	if err := rc.Login(ctx, u.User); err != nil {
		t.Fatal(err)
	}
	m := tags.NewManager(rc)
	cats, err := m.GetCategories(ctx)
	if err != nil || len(cats) != 2 {
		t.Fatalf("two categories: %v %v", cats, err)
	}
	tag, err := m.GetTagForCategory(ctx, "gold", "tier")
	if err != nil {
		t.Fatal(err)
	}
	refs, err := m.ListAttachedObjects(ctx, tag.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range refs {
		got = append(got, r.Reference().Value)
	}
	for _, vm := range vms[:2] {
		want = append(want, vm.Reference().Value)
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("tier/gold on %v, want %v", got, want)
	}
}

func TestTagTalksToTheVCenterAskedFor(t *testing.T) {
	dir := t.TempDir()
	labJSON := `{"vcenter": {"url": "https://127.0.0.1:1/sdk", "username": "u", "password": "p"},
		"vcenterCa": {"url": "https://127.0.0.1:2/sdk", "username": "u2", "password": "p2"}}`
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte(labJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	for which, want := range map[string]string{"main": "127.0.0.1:1", "ca": "127.0.0.1:2"} {
		u, err := labVCenterURL(dir, which)
		if err != nil || u.Host != want {
			t.Errorf("%s: %v %v, want %s", which, u, err, want)
		}
	}
	if _, err := labVCenterURL(dir, "other"); err == nil {
		t.Error("an unknown vCenter is refused")
	}
}
