package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vapi/tags"
	"github.com/vmware/govmomi/vim25/mo"

	// vCenter's REST API (sessions, tagging) on vcsim: registered with the simulator's
	// endpoints, served when Service.RegisterEndpoints is set (startVcsim).
	_ "github.com/vmware/govmomi/vapi/simulator"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runTag is `ferry-lab tag --state-dir DIR [--vcenter ca] --category C --tag T --vm NAME ...`:
// creates the tag category C (cardinality MULTIPLE, for VMs) and its tag T unless they exist,
// and attaches T to each VM, through the running lab's vCenter REST API as an operator would.
func runTag(args []string) int {
	fs := flag.NewFlagSet("ferry-lab tag", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "the running lab's state directory (holds lab.json)")
	category := fs.String("category", "", "the tag category's name")
	tag := fs.String("tag", "", "the tag's name")
	which := fs.String("vcenter", "main", "which of the lab's vCenters: main, or ca (the CA-signed one)")
	var vms stringList
	fs.Var(&vms, "vm", "a VM's inventory name (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || *category == "" || *tag == "" || len(vms) == 0 {
		fmt.Fprintln(os.Stderr, "ferry-lab tag: --state-dir, --category, --tag and --vm are required")
		return 2
	}
	u, err := labVCenterURL(*stateDir, *which)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-lab tag: %v\n", err)
		return 1
	}
	ctx := context.Background()
	// The lab's own certificate: this tool only ever talks to the lab it was started with.
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-lab tag: %v\n", err)
		return 1
	}
	defer c.Logout(context.Background())
	if err := tagVMs(ctx, c, u.User, *category, *tag, vms); err != nil {
		fmt.Fprintf(os.Stderr, "ferry-lab tag: %v\n", err)
		return 1
	}
	return 0
}

// labVCenterURL is the SDK URL, with its credentials, of the running lab's vCenter `which`
// ("main" or "ca"), from DIR/lab.json.
func labVCenterURL(stateDir, which string) (*url.URL, error) {
	type vc struct {
		URL      string `json:"url"`
		Username string `json:"username"`
		Password string `json:"password"`
	}
	var info struct {
		VCenter   vc `json:"vcenter"`
		VCenterCA vc `json:"vcenterCa"`
	}
	raw, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return nil, fmt.Errorf("lab.json: %w", err)
	}
	v := info.VCenter
	switch which {
	case "main":
	case "ca":
		v = info.VCenterCA
	default:
		return nil, fmt.Errorf("--vcenter %q: main or ca", which)
	}
	u, err := url.Parse(v.URL)
	if err != nil {
		return nil, err
	}
	u.User = url.UserPassword(v.Username, v.Password)
	return u, nil
}

// tagVMs makes sure category/tag exist (creating what is missing) and attaches the tag to the
// named VMs of the default datacenter. Idempotent.
func tagVMs(ctx context.Context, c *govmomi.Client, user *url.Userinfo, category, tag string, vms []string) error {
	rc := rest.NewClient(c.Client)
	if err := rc.Login(ctx, user); err != nil {
		return fmt.Errorf("REST login: %w", err)
	}
	defer rc.Logout(context.Background())
	m := tags.NewManager(rc)
	catID, err := ensureCategory(ctx, m, category)
	if err != nil {
		return err
	}
	tagID, err := ensureTag(ctx, m, catID, tag)
	if err != nil {
		return err
	}
	finder := find.NewFinder(c.Client, true)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		return err
	}
	finder.SetDatacenter(dc)
	var refs []mo.Reference
	for _, name := range vms {
		vm, err := finder.VirtualMachine(ctx, name)
		if err != nil {
			return err
		}
		refs = append(refs, vm.Reference())
	}
	if err := m.AttachTagToMultipleObjects(ctx, tagID, refs); err != nil {
		return fmt.Errorf("attaching tag %s/%s: %w", category, tag, err)
	}
	return nil
}

func ensureCategory(ctx context.Context, m *tags.Manager, name string) (string, error) {
	cats, err := m.GetCategories(ctx)
	if err != nil {
		return "", fmt.Errorf("listing categories: %w", err)
	}
	for _, c := range cats {
		if c.Name == name {
			return c.ID, nil
		}
	}
	id, err := m.CreateCategory(ctx, &tags.Category{
		Name:            name,
		Cardinality:     "MULTIPLE",
		AssociableTypes: []string{"VirtualMachine"},
	})
	if err != nil {
		return "", fmt.Errorf("creating category %s: %w", name, err)
	}
	return id, nil
}

func ensureTag(ctx context.Context, m *tags.Manager, categoryID, name string) (string, error) {
	existing, err := m.GetTagsForCategory(ctx, categoryID)
	if err != nil {
		return "", fmt.Errorf("listing the tags of category %s: %w", categoryID, err)
	}
	for _, t := range existing {
		if t.Name == name {
			return t.ID, nil
		}
	}
	id, err := m.CreateTag(ctx, &tags.Tag{Name: name, CategoryID: categoryID})
	if err != nil {
		return "", fmt.Errorf("creating tag %s: %w", name, err)
	}
	return id, nil
}
