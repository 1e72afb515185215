package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/task"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// cbtLab is vcsim behind the lab's front door (changedAreasSOAP), with one running VM whose
// first disk tests write directly, as its guest would.
type cbtLab struct {
	t        *testing.T
	ctx      context.Context
	model    *simulator.Model
	srv      *simulator.Server
	c        *govmomi.Client
	vm       *object.VirtualMachine
	dsDir    string
	stateDir string // holds a lab.json, for guest-write
	key      int32  // the first disk's device key
	dsPath   string // and its descriptor's datastore path
	capacity int64
	writes   byte         // makes every write's bytes new
	front    atomic.Value // the http.Handler in front of vcsim: the lab's front door
}

// newFront puts a new front door (with nothing kept from the last) in front of vcsim.
func (l *cbtLab) newFront() {
	mux := l.model.Service.ServeMux
	l.front.Store(changedAreasSOAP(mux, l.model.Map(), func() string { return l.dsDir },
		func(ck *http.Cookie) bool { return sessionAlive(mux, ck) }))
}

func newCBTLab(t *testing.T) *cbtLab {
	t.Helper()
	ctx := context.Background()
	model := simulator.VPX()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Remove)
	srv := model.Service.NewServer()
	t.Cleanup(srv.Close)
	l := &cbtLab{t: t, ctx: ctx, model: model, srv: srv, stateDir: t.TempDir()}
	l.newFront()
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.front.Load().(http.Handler).ServeHTTP(w, r)
	})
	c, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	l.c = c
	ds, err := findDatastore(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	l.dsDir = ds.Summary.Url
	if l.vm, err = find.NewFinder(c.Client, true).VirtualMachine(ctx, "/DC0/vm/DC0_H0_VM0"); err != nil {
		t.Fatal(err)
	}
	pass, _ := srv.URL.User.Password()
	labJSON := fmt.Sprintf(`{"vcenter": {"url": %q, "username": %q, "password": %q, "datastoreDir": %q}}`,
		(&url.URL{Scheme: srv.URL.Scheme, Host: srv.URL.Host, Path: "/sdk"}).String(), srv.URL.User.Username(), pass, l.dsDir)
	if err := os.WriteFile(filepath.Join(l.stateDir, "lab.json"), []byte(labJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	l.setCBT(true)
	d := l.currentDisk()
	l.key, l.dsPath, l.capacity = d.key, d.fileName, d.capacity
	// Some data, as an installed guest has: the partition table's block and a few more.
	l.write(0, 2, 3, 10)
	return l
}

func (l *cbtLab) wait(t *object.Task, err error) (types.AnyType, error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatal(err)
	}
	info, err := t.WaitForResult(l.ctx, nil)
	if err != nil {
		return nil, err
	}
	return info.Result, nil
}

func (l *cbtLab) setCBT(on bool) {
	l.t.Helper()
	if _, err := l.wait(l.vm.Reconfigure(l.ctx, types.VirtualMachineConfigSpec{ChangeTrackingEnabled: types.NewBool(on)})); err != nil {
		l.t.Fatal(err)
	}
}

func (l *cbtLab) power(on bool) {
	l.t.Helper()
	var err error
	if on {
		_, err = l.wait(l.vm.PowerOn(l.ctx))
	} else {
		_, err = l.wait(l.vm.PowerOff(l.ctx))
	}
	if err != nil {
		l.t.Fatal(err)
	}
}

func (l *cbtLab) snapshot(name string) types.ManagedObjectReference {
	l.t.Helper()
	res, err := l.wait(l.vm.CreateSnapshot(l.ctx, name, "ferry warm migration", false, false))
	if err != nil {
		l.t.Fatal(err)
	}
	return res.(types.ManagedObjectReference)
}

func (l *cbtLab) removeSnapshot(s types.ManagedObjectReference) {
	l.t.Helper()
	res, err := methods.RemoveSnapshot_Task(l.ctx, l.c.Client, &types.RemoveSnapshot_Task{This: s, RemoveChildren: false})
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := l.wait(object.NewTask(l.c.Client, res.Returnval), nil); err != nil {
		l.t.Fatal(err)
	}
}

// snapshotDisk is the first disk as the snapshot's config describes it.
func (l *cbtLab) snapshotDisk(s types.ManagedObjectReference) diskView {
	l.t.Helper()
	var o mo.VirtualMachineSnapshot
	if err := l.c.RetrieveOne(l.ctx, s, []string{"config.hardware.device"}, &o); err != nil {
		l.t.Fatal(err)
	}
	d, ok := diskByKey(disksOf(o.Config.Hardware.Device), l.key)
	if !ok {
		l.t.Fatalf("snapshot %s has no disk %d", s.Value, l.key)
	}
	return d
}

func (l *cbtLab) currentDisk() diskView {
	l.t.Helper()
	var o mo.VirtualMachine
	if err := l.vm.Properties(l.ctx, l.vm.Reference(), []string{"config.hardware.device"}, &o); err != nil {
		l.t.Fatal(err)
	}
	return disksOf(o.Config.Hardware.Device)[0]
}

// flat is the local flat extent a descriptor (datastore path) names, and the extent's offset.
func (l *cbtLab) flat(dsPath string) (string, int64) {
	l.t.Helper()
	local := filepath.Join(l.dsDir, strings.SplitN(dsPath, "] ", 2)[1])
	name, offset, ok := singleFlatExtent(local)
	if !ok {
		l.t.Fatalf("%s: not a flat descriptor", dsPath)
	}
	return filepath.Join(filepath.Dir(local), name), offset
}

// write puts new bytes into whole blocks of the live disk, as the guest does.
func (l *cbtLab) write(blocks ...int64) {
	l.t.Helper()
	path, offset := l.flat(l.dsPath)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	for _, b := range blocks {
		l.writes++
		buf := bytes.Repeat([]byte{l.writes, byte(b)}, vmfsBlock/2)
		if _, err := f.WriteAt(buf, offset+b*vmfsBlock); err != nil {
			l.t.Fatal(err)
		}
	}
}

// punch makes blocks of the live disk holes again, as an UNMAP (TRIM) from the guest does.
func (l *cbtLab) punch(blocks ...int64) {
	l.t.Helper()
	path, offset := l.flat(l.dsPath)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	for _, b := range blocks {
		const punchHole, keepSize = 0x02, 0x01
		if err := syscall.Fallocate(int(f.Fd()), punchHole|keepSize, offset+b*vmfsBlock, vmfsBlock); err != nil {
			l.t.Fatal(err)
		}
	}
}

// read is the disk (descriptor at dsPath) as ferry reads it: the extent's bytes.
func (l *cbtLab) read(dsPath string, blocks int64) []byte {
	l.t.Helper()
	path, offset := l.flat(dsPath)
	f, err := os.Open(path)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, blocks*vmfsBlock)
	if _, err := f.ReadAt(buf, offset); err != nil && err.Error() != "EOF" {
		l.t.Fatal(err)
	}
	return buf
}

func (l *cbtLab) query(s *types.ManagedObjectReference, changeID string, start int64) (types.DiskChangeInfo, error) {
	res, err := methods.QueryChangedDiskAreas(l.ctx, l.c.Client, &types.QueryChangedDiskAreas{
		This: l.vm.Reference(), Snapshot: s, DeviceKey: l.key, StartOffset: start, ChangeId: changeID,
	})
	if err != nil {
		return types.DiskChangeInfo{}, err
	}
	return res.Returnval, nil
}

// changed asks for the whole disk, page by page as the API says, and lists the blocks reported.
func (l *cbtLab) changed(s *types.ManagedObjectReference, changeID string) []int64 {
	l.t.Helper()
	var blocks []int64
	for start := int64(0); start < l.capacity; {
		info, err := l.query(s, changeID, start)
		if err != nil {
			l.t.Fatalf("QueryChangedDiskAreas(%v, %q, %d): %v", s, changeID, start, err)
		}
		if info.StartOffset != start || info.Length <= 0 || len(info.ChangedArea) > maxAreasPerReply {
			l.t.Fatalf("answer at %d: startOffset %d length %d, %d areas", start, info.StartOffset, info.Length, len(info.ChangedArea))
		}
		for i, a := range info.ChangedArea {
			if a.Start%vmfsBlock != 0 || a.Length%vmfsBlock != 0 || a.Start < start || a.Start+a.Length > start+info.Length {
				l.t.Fatalf("area %+v of answer %d+%d", a, start, info.Length)
			}
			if i > 0 && info.ChangedArea[i-1].Start+info.ChangedArea[i-1].Length >= a.Start {
				l.t.Fatalf("areas not merged or out of order: %+v", info.ChangedArea)
			}
			for b := a.Start / vmfsBlock; b < (a.Start+a.Length)/vmfsBlock; b++ {
				blocks = append(blocks, b)
			}
		}
		start += info.Length
	}
	return blocks
}

func vimFault(t *testing.T, err error) types.BaseMethodFault {
	t.Helper()
	if err == nil {
		t.Fatal("want a fault, got none")
	}
	var te task.Error
	if errors.As(err, &te) {
		return te.Fault()
	}
	if !soap.IsSoapFault(err) {
		t.Fatalf("want a SOAP fault, got %v", err)
	}
	// A SOAP fault's detail comes decoded as a value; task faults are pointers.
	v := reflect.ValueOf(soap.ToSoapFault(err).VimFault())
	if v.Kind() == reflect.Pointer {
		return v.Interface().(types.BaseMethodFault)
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return p.Interface().(types.BaseMethodFault)
}

// A snapshot of a running VM names, for its disk, a file holding the disk as it was then: the
// guest's later writes change the VM's current disk only.
func TestSnapshotFreezesTheDiskOfARunningVM(t *testing.T) {
	l := newCBTLab(t)
	const blocks = 16
	before := l.read(l.dsPath, blocks)
	s := l.snapshot("round-1")
	l.write(2, 5)
	l.punch(3)

	frozen := l.snapshotDisk(s)
	if want := fmt.Sprintf("[LocalDS_0] DC0_H0_VM0/disk1-%s.vmdk", s.Value); frozen.fileName != want {
		t.Errorf("snapshot's disk %q, want %q", frozen.fileName, want)
	}
	if cur := l.currentDisk(); cur.fileName != l.dsPath {
		t.Errorf("the VM's current disk moved to %q", cur.fileName)
	}
	if !bytes.Equal(l.read(frozen.fileName, blocks), before) {
		t.Error("the frozen disk is not the disk as it was at the snapshot")
	}
	if bytes.Equal(l.read(l.dsPath, blocks), before) {
		t.Error("the guest's writes did not reach the live disk")
	}
	// Sparse: the frozen copy holds data where the disk did, and nothing else.
	if got := l.changed(&s, "*"); !slices.Equal(got, []int64{0, 2, 3, 10}) {
		t.Errorf("allocated blocks of the frozen disk %v", got)
	}
}

// QueryChangedDiskAreas(snapshot 2, change id of snapshot 1) reports exactly the blocks the
// guest changed in between.
func TestChangedAreasBetweenTwoSnapshots(t *testing.T) {
	many := []int64{}
	for b := int64(200); len(many) < 70; b += 2 {
		many = append(many, b)
	}
	cases := []struct {
		name  string
		write []int64
		punch []int64
		want  []int64
	}{
		{name: "nothing written", want: nil},
		{name: "one block", write: []int64{5}, want: []int64{5}},
		{name: "a block that held data", write: []int64{2}, want: []int64{2}},
		{name: "adjacent blocks", write: []int64{7, 8, 9}, want: []int64{7, 8, 9}},
		{name: "data became a hole", punch: []int64{3}, want: []int64{3}},
		{name: "the last block", write: []int64{10239}, want: []int64{10239}},
		{name: "more areas than one answer carries", write: many, want: many},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newCBTLab(t)
			s1 := l.snapshot("round-1")
			id1 := l.snapshotDisk(s1).changeID
			if !changeIDForm.MatchString(id1) || !strings.HasPrefix(id1, "52 ") {
				t.Fatalf("change id %q is not of vSphere's form", id1)
			}
			l.write(c.write...)
			l.punch(c.punch...)
			s2 := l.snapshot("round-2")
			id2 := l.snapshotDisk(s2).changeID
			if id2 == id1 || !changeIDForm.MatchString(id2) {
				t.Fatalf("second change id %q after %q", id2, id1)
			}
			if cur := l.currentDisk().changeID; cur != id2 {
				t.Errorf("the VM's disk carries change id %q, want the latest %q", cur, id2)
			}
			if got := l.changed(&s2, id1); !slices.Equal(got, c.want) {
				t.Errorf("changed blocks %v, want %v", got, c.want)
			}
			if got := l.changed(&s2, id2); len(got) != 0 {
				t.Errorf("a snapshot against its own id: %v", got)
			}
		})
	}
}

// "*" with a snapshot is what the snapshot froze, not what the guest wrote since.
func TestChangedAreasStarIsTheFrozenDisksAllocation(t *testing.T) {
	l := newCBTLab(t)
	s := l.snapshot("round-1")
	l.write(40, 41)
	if got := l.changed(&s, "*"); !slices.Equal(got, []int64{0, 2, 3, 10}) {
		t.Errorf("allocated blocks %v", got)
	}
	info, err := l.query(&s, "*", 3*vmfsBlock+512)
	if err != nil {
		t.Fatal(err)
	}
	if info.StartOffset != 3*vmfsBlock+512 || len(info.ChangedArea) != 2 || info.ChangedArea[0].Start != 3*vmfsBlock+512 {
		t.Errorf("from the middle of block 3: %+v", info)
	}
}

// Change ids and snapshots QueryChangedDiskAreas refuses, with vSphere's faults.
func TestChangedAreasFaults(t *testing.T) {
	l := newCBTLab(t)
	s := l.snapshot("round-1")
	id := l.snapshotDisk(s).changeID
	uuid, seq, _ := parseChangeID(id)
	other, err := find.NewFinder(l.c.Client, true).VirtualMachine(l.ctx, "/DC0/vm/DC0_H0_VM1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := methods.CreateSnapshot_Task(l.ctx, l.c.Client, &types.CreateSnapshot_Task{This: other.Reference(), Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	otherSnap, err := l.wait(object.NewTask(l.c.Client, res.Returnval), nil)
	if err != nil {
		t.Fatal(err)
	}
	otherRef := otherSnap.(types.ManagedObjectReference)
	missing := types.ManagedObjectReference{Type: "VirtualMachineSnapshot", Value: "snapshot-999999"}
	uuid[15]++
	cases := []struct {
		name     string
		snapshot *types.ManagedObjectReference
		changeID string
		check    func(types.BaseMethodFault) bool
	}{
		{"an id this disk never gave", &s, formatChangeID(uuid, seq), isCannotGetChanges},
		{"a later sequence", &s, formatChangeID(func() [16]byte { u, _, _ := parseChangeID(id); return u }(), seq+5), isCannotGetChanges},
		{"not a change id", &s, "yesterday", func(f types.BaseMethodFault) bool {
			a, ok := f.(*types.InvalidArgument)
			return ok && a.InvalidProperty == "changeId"
		}},
		{"another VM's snapshot", &otherRef, id, func(f types.BaseMethodFault) bool {
			a, ok := f.(*types.InvalidArgument)
			return ok && a.InvalidProperty == "snapshot"
		}},
		{"a snapshot that does not exist", &missing, id, func(f types.BaseMethodFault) bool {
			_, ok := f.(*types.ManagedObjectNotFound)
			return ok
		}},
		{"no snapshot, the VM on", nil, id, func(f types.BaseMethodFault) bool {
			_, ok := f.(*types.InvalidPowerState)
			return ok
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.query(c.snapshot, c.changeID, 0)
			if f := vimFault(t, err); !c.check(f) {
				t.Errorf("fault %#v", f)
			}
		})
	}
}

func isCannotGetChanges(f types.BaseMethodFault) bool {
	ff, ok := f.(*types.FileFault)
	return ok && ff.File != "" && len(ff.FaultMessage) == 1 && ff.FaultMessage[0].Key == "vim.hostd.vmsvc.cbt.cannotGetChanges"
}

// After RemoveSnapshot_Task the frozen files are gone, the live disk is not, and the removed
// snapshot's change id still answers against a later snapshot.
func TestRemovedSnapshotsLeaveTheirChangeIDs(t *testing.T) {
	l := newCBTLab(t)
	s1 := l.snapshot("round-1")
	d1 := l.snapshotDisk(s1)
	frozenFlat, _ := l.flat(d1.fileName)
	frozenDesc := filepath.Join(l.dsDir, strings.SplitN(d1.fileName, "] ", 2)[1])
	liveFlat, _ := l.flat(l.dsPath)
	l.removeSnapshot(s1)
	for _, p := range []string{frozenFlat, frozenDesc} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after RemoveSnapshot_Task: %v", p, err)
		}
	}
	if _, err := os.Stat(liveFlat); err != nil {
		t.Fatalf("the live disk: %v", err)
	}
	l.write(12, 13)
	s2 := l.snapshot("round-2")
	if got := l.changed(&s2, d1.changeID); !slices.Equal(got, []int64{12, 13}) {
		t.Errorf("changed since the removed snapshot's id: %v", got)
	}

	// RemoveAllSnapshots_Task removes every frozen file, and leaves nothing of a freeze behind.
	l.snapshot("round-3")
	if _, err := l.wait(l.vm.RemoveAllSnapshot(l.ctx, nil)); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Dir(liveFlat))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), "snapshot-") || strings.Contains(e.Name(), "freezing") {
			t.Errorf("left after RemoveAllSnapshots_Task: %s", e.Name())
		}
	}
}

// vSphere supports 32 snapshots in a chain: the 33rd is refused, as a failed task.
func TestTheThirtyThirdSnapshotLevelIsRefused(t *testing.T) {
	l := newCBTLab(t)
	for i := 1; i <= maxSnapshotLevels; i++ {
		l.snapshot(fmt.Sprintf("level-%d", i))
	}
	_, err := l.wait(l.vm.CreateSnapshot(l.ctx, "level-33", "", false, false))
	if _, ok := vimFault(t, err).(*types.TooManySnapshotLevels); !ok {
		t.Fatalf("33rd level: %v", err)
	}
	var o mo.VirtualMachine
	if err := l.vm.Properties(l.ctx, l.vm.Reference(), []string{"snapshot"}, &o); err != nil {
		t.Fatal(err)
	}
	depth := 0
	for tree := o.Snapshot.RootSnapshotList; len(tree) > 0; tree = tree[0].ChildSnapshotList {
		depth++
	}
	if depth != maxSnapshotLevels {
		t.Errorf("chain depth %d", depth)
	}
	path, _ := l.flat(l.dsPath)
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*freezing*"))
	if len(matches) > 0 {
		t.Errorf("left by the refused snapshot: %v", matches)
	}
}

// Turning change tracking off and on again starts a new history: the old ids are refused.
func TestChangeTrackingOffAndOnInvalidatesOldIDs(t *testing.T) {
	l := newCBTLab(t)
	s1 := l.snapshot("round-1")
	id1 := l.snapshotDisk(s1).changeID
	l.removeSnapshot(s1)
	l.setCBT(false)
	if cur := l.currentDisk().changeID; cur != "" {
		t.Errorf("change id %q with tracking off", cur)
	}
	l.setCBT(true)
	s2 := l.snapshot("round-2")
	id2 := l.snapshotDisk(s2).changeID
	if _, err := l.query(&s2, id1, 0); !isCannotGetChanges(vimFault(t, err)) {
		t.Errorf("an id from before the reset: %v", err)
	}
	u1, _, _ := parseChangeID(id1)
	u2, _, _ := parseChangeID(id2)
	if u1 == u2 {
		t.Errorf("the new tracking kept the uuid: %q then %q", id1, id2)
	}
	if got := l.changed(&s2, id2); len(got) != 0 {
		t.Errorf("the new id: %v", got)
	}
}

// At cutover the VM is off and ferry asks without a snapshot: the answer is the live disk.
func TestPoweredOffVMAnswersFromItsCurrentDisk(t *testing.T) {
	l := newCBTLab(t)
	s := l.snapshot("round-1")
	id := l.snapshotDisk(s).changeID
	l.removeSnapshot(s)
	l.write(20, 21, 30)
	l.punch(10)
	l.power(false)
	if got := l.changed(nil, id); !slices.Equal(got, []int64{10, 20, 21, 30}) {
		t.Errorf("changed blocks %v", got)
	}
	if got := l.changed(nil, "*"); !slices.Equal(got, []int64{0, 2, 3, 20, 21, 30}) {
		t.Errorf("allocated blocks %v", got)
	}
}

// The change ids live in files: a new front door, which keeps nothing of the old one (as a lab
// process started again over the same datastore), answers the ids the old one gave.
func TestChangeIDsSurviveANewLabProcess(t *testing.T) {
	l := newCBTLab(t)
	s := l.snapshot("round-1")
	id := l.snapshotDisk(s).changeID
	l.write(50)
	s2 := l.snapshot("round-2")

	l.newFront()
	if got := l.changed(&s2, id); !slices.Equal(got, []int64{50}) {
		t.Errorf("changed blocks through the new lab process %v", got)
	}
}

func TestChangeIDForm(t *testing.T) {
	u := [16]byte{0x52, 0x3d, 0x1b, 0x9e, 0x8e, 0x2c, 0x49, 0x2d, 0x0b, 0x0d, 0x0e, 0x74, 0x7f, 0x67, 0x4b, 0x9d}
	id := formatChangeID(u, 5)
	if id != "52 3d 1b 9e 8e 2c 49 2d-0b 0d 0e 74 7f 67 4b 9d/5" {
		t.Fatalf("id %q", id)
	}
	for _, c := range []struct {
		id string
		ok bool
	}{{id, true}, {"*", false}, {"52 3d 1b 9e 8e 2c 49 2d-0b 0d 0e 74 7f 67 4b/5", false}, {strings.ToUpper(id), false}, {id + "x", false}} {
		got, seq, ok := parseChangeID(c.id)
		if ok != c.ok || (ok && (got != u || seq != 5)) {
			t.Errorf("parse %q: %v %d %v", c.id, got, seq, ok)
		}
	}
}
