package main

// Snapshots whose disks are frozen, as vSphere's are, where vcsim's CreateSnapshot_Task only
// writes a .vmsn and leaves every disk as it is.
//
// vSphere's contract (vSphere API reference, VirtualMachine.CreateSnapshot_Task and
// VirtualMachineSnapshot.config; VDDK programming guide, "Changed Block Tracking on Virtual
// Disks"): the snapshot's config.hardware.device[] names, for each disk, a file that holds the
// disk as it was when the snapshot was taken, and with change tracking on its backing's changeId
// names that point in the disk's history. vSphere keeps the base disk for the snapshot and moves
// the running VM to a new delta disk; the lab does the reverse, which keeps that contract: the
// guest keeps writing the VM's current disk (the live flat file), and the snapshot's backing
// names a copy frozen when the snapshot was taken:
//
//   [ds] VM/disk1-snapshot-42.vmdk       a descriptor like the live one, naming
//   [ds] VM/disk1-snapshot-42-flat.vmdk  a sparse copy of the live flat extent
//
// (a disk that is one self-contained file, e.g. monolithicSparse, is copied whole as
// disk1-snapshot-42.vmdk). Independent disks are left out, as vSphere leaves them out of
// snapshots: the snapshot keeps naming the live disk. RemoveSnapshot_Task and
// RemoveAllSnapshots_Task delete the frozen files of the snapshots they removed; change ids
// stay valid (cbt.go). A ReconfigVM_Task that switches changeTrackingEnabled resets tracking.
//
// The chain limit is vSphere's: a snapshot at depth 33 is refused with TooManySnapshotLevels
// ("a maximum of 32 snapshots in a chain is supported", VMware KB "Best practices for using
// VMware snapshots in the vSphere environment"), as a failed task, as CreateSnapshot_Task reports
// its faults.
//
// Why in front of /sdk (as QueryChangedDiskAreas is, changed_areas.go) and not through vcsim's
// Registry.Handler: the hook runs before the call, but the snapshot only exists once vcsim's task
// has run, and its moref reaches the client in the task's result. In front of /sdk the lab
// passes the call on, waits for vcsim's task to finish, names the frozen files after the new
// snapshot and patches its config, and only then hands the task's moref to the client: no client
// can read the snapshot before it is complete. The answer is vcsim's own.

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

const maxSnapshotLevels = 32

// snapshotPendingFile is there, beside a VM's first disk, while a CreateSnapshot_Task on it
// waits out the VM's ferry.lab.snapshotDelay.
const snapshotPendingFile = ".ferry-lab-snapshot-pending"

// diskView is what the lab needs of one VirtualDisk.
type diskView struct {
	key         int32
	fileName    string // datastore path of its descriptor
	capacity    int64
	changeID    string
	independent bool
}

func disksOf(devices []types.BaseVirtualDevice) []diskView {
	var out []diskView
	for _, d := range devices {
		vd, ok := d.(*types.VirtualDisk)
		if !ok {
			continue
		}
		fb, ok := vd.Backing.(types.BaseVirtualDeviceFileBackingInfo)
		if !ok {
			continue
		}
		v := diskView{key: vd.Key, fileName: fb.GetVirtualDeviceFileBackingInfo().FileName, capacity: vd.CapacityInBytes}
		if v.capacity == 0 {
			v.capacity = vd.CapacityInKB * 1024
		}
		if id := changeIDField(vd.Backing); id != nil {
			v.changeID = *id
		}
		if b, ok := vd.Backing.(*types.VirtualDiskFlatVer2BackingInfo); ok {
			v.independent = strings.HasPrefix(b.DiskMode, "independent")
		}
		out = append(out, v)
	}
	return out
}

func diskByKey(disks []diskView, key int32) (diskView, bool) {
	for _, d := range disks {
		if d.key == key {
			return d, true
		}
	}
	return diskView{}, false
}

// changeIDField is the backing's changeId, for the backings that have one.
func changeIDField(b types.BaseVirtualDeviceBackingInfo) *string {
	switch b := b.(type) {
	case *types.VirtualDiskFlatVer2BackingInfo:
		return &b.ChangeId
	case *types.VirtualDiskSparseVer2BackingInfo:
		return &b.ChangeId
	case *types.VirtualDiskSeSparseBackingInfo:
		return &b.ChangeId
	case *types.VirtualDiskRawDiskMappingVer1BackingInfo:
		return &b.ChangeId
	}
	return nil
}

func trackingOn(vm *simulator.VirtualMachine) bool {
	return vm.Config != nil && vm.Config.ChangeTrackingEnabled != nil && *vm.Config.ChangeTrackingEnabled
}

// snapshotDepth is ref's depth in the tree (a root snapshot is at 1), 0 if it is not there.
func snapshotDepth(tree []types.VirtualMachineSnapshotTree, ref types.ManagedObjectReference, depth int) int {
	for _, s := range tree {
		if s.Snapshot == ref {
			return depth
		}
		if d := snapshotDepth(s.ChildSnapshotList, ref, depth+1); d > 0 {
			return d
		}
	}
	return 0
}

func allSnapshots(tree []types.VirtualMachineSnapshotTree) []types.ManagedObjectReference {
	var out []types.ManagedObjectReference
	for _, s := range tree {
		out = append(out, s.Snapshot)
		out = append(out, allSnapshots(s.ChildSnapshotList)...)
	}
	return out
}

// siblingPath is the datastore path of name in dsPath's directory.
func siblingPath(dsPath, name string) string {
	if i := strings.LastIndex(dsPath, "/"); i >= 0 {
		return dsPath[:i+1] + name
	}
	if i := strings.Index(dsPath, "] "); i >= 0 {
		return dsPath[:i+2] + name
	}
	return name
}

// frozenDisk is one disk's copy for a snapshot being taken: under a temporary name until the
// snapshot exists (settle), then under the snapshot's.
type frozenDisk struct {
	disk       diskView
	live       string // the live descriptor (local path)
	extent     string // the live flat extent's file name; "" when the whole file was copied
	tmp        string // the copy (local path) until settled
	descriptor string // the frozen descriptor (local path), once settled
}

// freeze copies the disk's data as it is now.
func freeze(d diskView, live string) (*frozenDisk, error) {
	dir, stem := filepath.Dir(live), strings.TrimSuffix(filepath.Base(live), ".vmdk")
	fz := &frozenDisk{disk: d, live: live}
	src := live
	fz.tmp = filepath.Join(dir, stem+"-freezing-"+randHex(4)+".vmdk")
	if flat, _, ok := singleFlatExtent(live); ok {
		fz.extent = flat
		src = filepath.Join(dir, flat)
		fz.tmp = strings.TrimSuffix(fz.tmp, ".vmdk") + "-flat.vmdk"
	}
	if err := sparseCopy(src, fz.tmp); err != nil {
		return nil, err
	}
	return fz, nil
}

// settle names the copy after the snapshot (its moref value) and writes its descriptor.
func (fz *frozenDisk) settle(snapshot string) error {
	dir, stem := filepath.Dir(fz.live), strings.TrimSuffix(filepath.Base(fz.live), ".vmdk")
	fz.descriptor = filepath.Join(dir, stem+"-"+snapshot+".vmdk")
	if fz.extent == "" {
		return os.Rename(fz.tmp, fz.descriptor)
	}
	flat := stem + "-" + snapshot + "-flat.vmdk"
	text, err := os.ReadFile(fz.live)
	if err != nil {
		return err
	}
	lines := strings.Split(string(text), "\n")
	for i, l := range lines {
		if w := strings.Fields(l); len(w) >= 3 && (w[0] == "RW" || w[0] == "RDONLY") {
			lines[i] = strings.Replace(l, `"`+fz.extent+`"`, `"`+flat+`"`, 1)
		}
	}
	if err := os.Rename(fz.tmp, filepath.Join(dir, flat)); err != nil {
		return err
	}
	return writeFileAtomic(fz.descriptor, []byte(strings.Join(lines, "\n")), 0o644)
}

// discard removes whatever the copy left.
func (fz *frozenDisk) discard() {
	_ = os.Remove(fz.tmp)
}

// removeFrozen deletes a snapshot's frozen copy of a disk: only a file named for that snapshot,
// so that the live disk (a snapshot taken without the lab's hook names it) is never touched.
func removeFrozen(descriptor, snapshot string) {
	base := filepath.Base(descriptor)
	if !strings.HasSuffix(base, "-"+snapshot+".vmdk") {
		return
	}
	if flat, _, ok := singleFlatExtent(descriptor); ok && strings.Contains(flat, "-"+snapshot+"-") {
		_ = os.Remove(filepath.Join(filepath.Dir(descriptor), flat))
	}
	_ = os.Remove(descriptor)
}

var taskReturnval = regexp.MustCompile(`<returnval[^>]*>([^<]+)</returnval>`)

// passOn hands the request to vcsim and keeps its answer.
func passOn(next http.Handler, r *http.Request, body []byte) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	replayTo(next, rec, r, body)
	return rec
}

func replay(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// taskResult waits for the task vcsim's answer names and returns how it ended.
func (v *vsphereFiles) taskResult(rec *httptest.ResponseRecorder) (types.TaskInfo, bool) {
	m := taskReturnval.FindSubmatch(rec.Body.Bytes())
	if rec.Code != http.StatusOK || m == nil {
		return types.TaskInfo{}, false
	}
	t, ok := v.reg.Get(types.ManagedObjectReference{Type: "Task", Value: string(m[1])}).(*simulator.Task)
	if !ok {
		return types.TaskInfo{}, false
	}
	t.Wait()
	var info types.TaskInfo
	v.withLock(t, func() { info = t.Info })
	return info, info.State == types.TaskInfoStateSuccess
}

// failedTask is a task of the VM's that has failed with fault, as vSphere reports a task
// method's faults.
func (v *vsphereFiles) failedTask(vm types.ManagedObjectReference, name string, fault types.BaseMethodFault, msg string) types.ManagedObjectReference {
	ctx := &simulator.Context{Map: v.reg, Context: context.Background()}
	task := simulator.CreateTask(vm, name, func(*simulator.Task) (types.AnyType, types.BaseMethodFault) { return nil, fault })
	ref := task.Run(ctx)
	task.Wait()
	// vcsim words the message as the fault's Go type; vSphere's is a sentence. No client knows
	// the task yet, so nothing sees the change.
	v.reg.AtomicUpdate(ctx, task, []types.PropertyChange{
		{Name: "info.error", Val: types.LocalizedMethodFault{Fault: fault, LocalizedMessage: msg}},
	})
	return ref
}

func writeTaskResponse(w http.ResponseWriter, method string, task types.ManagedObjectReference) {
	writeEnvelope(w, http.StatusOK, fmt.Sprintf(`<%sResponse xmlns="urn:vim25"><returnval type="Task">%s</returnval></%sResponse>`,
		method, task.Value, method))
}

// createSnapshot is CreateSnapshot_Task (or CreateSnapshotEx_Task, method) on the VM this.
func (v *vsphereFiles) createSnapshot(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler, method string, this types.ManagedObjectReference) {
	vm, ok := v.reg.Get(this).(*simulator.VirtualMachine)
	if !ok {
		replay(w, passOn(next, r, body))
		return
	}
	var delay, dir string
	v.withLock(vm, func() {
		delay = extraConfigValue(vm, labSnapshotDelayKey)
		if ds := disksOf(vm.Config.Hardware.Device); len(ds) > 0 {
			if p, ok := v.local(ds[0].fileName); ok {
				dir = filepath.Dir(p)
			}
		}
	})
	if d, err := time.ParseDuration(delay); err == nil && d > 0 {
		// While it waits, a file beside the VM's first disk says so: what a test does in
		// that window happens between the client's call and the snapshot.
		marker := filepath.Join(dir, snapshotPendingFile)
		if dir != "" {
			_ = os.WriteFile(marker, nil, 0o644)
		}
		time.Sleep(d)
		if dir != "" {
			_ = os.Remove(marker)
		}
	}
	mu := v.vmLock(this)
	mu.Lock()
	defer mu.Unlock()
	var disks []diskView
	var cbt bool
	depth := 0
	v.withLock(vm, func() {
		cbt = trackingOn(vm)
		disks = disksOf(vm.Config.Hardware.Device)
		if vm.Snapshot != nil && vm.Snapshot.CurrentSnapshot != nil {
			depth = snapshotDepth(vm.Snapshot.RootSnapshotList, *vm.Snapshot.CurrentSnapshot, 1)
		}
	})
	if depth+1 > maxSnapshotLevels {
		writeTaskResponse(w, method, v.failedTask(this, "createSnapshotTask", new(types.TooManySnapshotLevels),
			fmt.Sprintf("The snapshot hierarchy is too deep: at most %d snapshots in a chain.", maxSnapshotLevels)))
		return
	}
	var frozen []*frozenDisk
	discard := func() {
		for _, fz := range frozen {
			fz.discard()
		}
	}
	for _, d := range disks {
		if d.independent {
			continue
		}
		live, ok := v.local(d.fileName)
		var fz *frozenDisk
		err := fmt.Errorf("%s is not on the lab's datastore", d.fileName)
		if ok {
			fz, err = freeze(d, live)
		}
		if err != nil {
			discard()
			log.Printf("ferry-lab: snapshot of %s: %v", vm.Name, err)
			writeTaskResponse(w, method, v.failedTask(this, "createSnapshotTask",
				&types.FileFault{File: d.fileName}, "Error caused by file "+d.fileName))
			return
		}
		frozen = append(frozen, fz)
	}

	rec := passOn(next, r, body)
	info, ok := v.taskResult(rec)
	snap, isRef := info.Result.(types.ManagedObjectReference)
	if !ok || !isRef {
		discard()
		replay(w, rec)
		return
	}

	// The disks' views and change ids, by device key.
	files, ids := map[int32]string{}, map[int32]string{}
	for _, fz := range frozen {
		if err := fz.settle(snap.Value); err != nil {
			log.Printf("ferry-lab: snapshot %s of %s: %v", snap.Value, vm.Name, err)
			fz.discard()
			continue
		}
		files[fz.disk.key] = siblingPath(fz.disk.fileName, filepath.Base(fz.descriptor))
		if !cbt {
			continue
		}
		d, err := diskDigests(fz.descriptor, fz.disk.capacity)
		if err == nil {
			ids[fz.disk.key], err = newChangeID(fz.live, d)
		}
		if err != nil {
			log.Printf("ferry-lab: change id for %s of %s: %v", fz.disk.fileName, vm.Name, err)
		}
	}
	if s, ok := v.reg.Get(snap).(*simulator.VirtualMachineSnapshot); ok {
		v.withLock(s, func() {
			setDisks(s.Config.Hardware.Device, files, ids)
			v.update(s, []types.PropertyChange{{Name: "config", Val: s.Config}})
		})
	}
	if len(ids) > 0 {
		// The VM's current disk carries the latest id too (vSphere API reference,
		// VirtualDiskFlatVer2BackingInfo.changeId).
		v.withLock(vm, func() {
			setDisks(vm.Config.Hardware.Device, nil, ids)
			v.update(vm, []types.PropertyChange{{Name: "config.hardware.device", Val: vm.Config.Hardware.Device}})
		})
	}
	replay(w, rec)
}

// setDisks sets the backing file name and changeId of the disks named in files and ids.
func setDisks(devices []types.BaseVirtualDevice, files, ids map[int32]string) {
	for _, d := range devices {
		vd, ok := d.(*types.VirtualDisk)
		if !ok {
			continue
		}
		if f, ok := files[vd.Key]; ok {
			if fb, ok := vd.Backing.(types.BaseVirtualDeviceFileBackingInfo); ok {
				fb.GetVirtualDeviceFileBackingInfo().FileName = f
			}
		}
		if id, ok := ids[vd.Key]; ok {
			if p := changeIDField(vd.Backing); p != nil {
				*p = id
			}
		}
	}
}

// removeSnapshots is RemoveSnapshot_Task (snapshot set, children as asked) or
// RemoveAllSnapshots_Task (snapshot nil) on vm: vcsim removes them, the lab their frozen files.
func (v *vsphereFiles) removeSnapshots(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler, vmRef types.ManagedObjectReference, snapshot *types.ManagedObjectReference, children bool) {
	vm, ok := v.reg.Get(vmRef).(*simulator.VirtualMachine)
	if !ok {
		replay(w, passOn(next, r, body))
		return
	}
	mu := v.vmLock(vmRef)
	mu.Lock()
	defer mu.Unlock()
	var candidates []types.ManagedObjectReference
	v.withLock(vm, func() {
		if vm.Snapshot == nil {
			return
		}
		if snapshot == nil {
			candidates = allSnapshots(vm.Snapshot.RootSnapshotList)
			return
		}
		for _, s := range allSnapshots(vm.Snapshot.RootSnapshotList) {
			if s == *snapshot {
				candidates = append(candidates, s)
			}
		}
		if children {
			candidates = append(candidates, descendants(vm.Snapshot.RootSnapshotList, *snapshot, false)...)
		}
	})
	files := map[types.ManagedObjectReference][]string{}
	for _, ref := range candidates {
		s, ok := v.reg.Get(ref).(*simulator.VirtualMachineSnapshot)
		if !ok {
			continue
		}
		v.withLock(s, func() {
			for _, d := range disksOf(s.Config.Hardware.Device) {
				if p, ok := v.local(d.fileName); ok {
					files[ref] = append(files[ref], p)
				}
			}
		})
	}
	rec := passOn(next, r, body)
	if _, ok := v.taskResult(rec); ok {
		for ref, paths := range files {
			if v.reg.Get(ref) != nil {
				continue // still there
			}
			for _, p := range paths {
				removeFrozen(p, ref.Value)
			}
		}
	}
	replay(w, rec)
}

// descendants lists the snapshots under ref in the tree (below: ref's subtree is being walked).
func descendants(tree []types.VirtualMachineSnapshotTree, ref types.ManagedObjectReference, below bool) []types.ManagedObjectReference {
	var out []types.ManagedObjectReference
	for _, s := range tree {
		if below {
			out = append(out, s.Snapshot)
		}
		out = append(out, descendants(s.ChildSnapshotList, ref, below || s.Snapshot == ref)...)
	}
	return out
}

// reconfigure is a ReconfigVM_Task that sets changeTrackingEnabled: when the setting changes,
// the disks' tracking starts over. vSphere deletes the ctk files when tracking is turned off,
// so every change id given before is refused afterwards, also once it is on again.
func (v *vsphereFiles) reconfigure(w http.ResponseWriter, r *http.Request, body []byte, next http.Handler, this types.ManagedObjectReference) {
	vm, ok := v.reg.Get(this).(*simulator.VirtualMachine)
	if !ok {
		replay(w, passOn(next, r, body))
		return
	}
	mu := v.vmLock(this)
	mu.Lock()
	defer mu.Unlock()
	var before bool
	v.withLock(vm, func() { before = trackingOn(vm) })
	rec := passOn(next, r, body)
	if _, ok := v.taskResult(rec); ok {
		var after bool
		var disks []diskView
		v.withLock(vm, func() {
			after = trackingOn(vm)
			disks = disksOf(vm.Config.Hardware.Device)
		})
		if after != before {
			ids := map[int32]string{}
			for _, d := range disks {
				ids[d.key] = ""
				if p, ok := v.local(d.fileName); ok {
					if err := resetTracking(p); err != nil {
						log.Printf("ferry-lab: resetting change tracking of %s: %v", d.fileName, err)
					}
				}
			}
			v.withLock(vm, func() {
				setDisks(vm.Config.Hardware.Device, nil, ids)
				v.update(vm, []types.PropertyChange{{Name: "config.hardware.device", Val: vm.Config.Hardware.Device}})
			})
		}
	}
	replay(w, rec)
}
