package main

// QueryChangedDiskAreas for vcsim, which does not implement it, played from the datastore's own
// files: change id "*" (vSphere's production source of a disk's allocated areas) is the data
// ranges of the flat extent (SEEK_DATA/SEEK_HOLE), as VMFS reports the blocks a thin disk has
// allocated; a real change id is compared with the lab's record of the disk at that id (cbt.go).
//
// vcsim dispatches a SOAP call by reflection to a method of the managed object's Go type, and
// its method hook (Registry.Handler) cannot stand in for an object a session can see (the
// session's own lookup, which falls back to the shared registry, wins after the hook). So the
// lab answers this call in front of vcsim's /sdk handler: it decodes the request with vcsim's
// own decoder (simulator.UnmarshalBody), checks the session cookie like /folder does, reads the
// VM and the snapshot from vcsim's registry under their locks, and answers in SOAP. The same
// front door follows the snapshot and change-tracking calls (snapshots.go).
//
// As unkind as vSphere (vSphere API reference for QueryChangedDiskAreas and DiskChangeInfo; VDDK
// programming guide, "Changed Block Tracking on Virtual Disks"):
//   - with a snapshot it answers for the disk as that snapshot froze it (snapshots.go), in any
//     power state; a snapshot that does not exist is ManagedObjectNotFound, another VM's
//     InvalidArgument (snapshot);
//   - without a snapshot it answers only for a powered-off VM (InvalidPowerState otherwise),
//     from the VM's current disk;
//   - change tracking must be enabled on the VM (FileFault otherwise);
//   - change id "*": every allocated area; an id of this disk's current tracking: the blocks
//     whose contents differ from the id's record; an id of the right form that this disk's
//     tracking did not give, or gave before a reset: FileFault (message key
//     vim.hostd.vmsvc.cbt.cannotGetChanges, as hostd answers it); anything else: InvalidArgument
//     (changeId);
//   - areas are reported in whole 1 MiB VMFS blocks, adjacent ones merged, and at most 64 areas
//     per answer: callers must ask again from startOffset+length, as the API says;
//   - a disk that is not a single flat extent is reported as one area covering it all ("on
//     other storage types ... returns a single extent covering the entire disk").

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	vmfsBlock        = 1 << 20
	maxAreasPerReply = 64
	seekData         = 3
	seekHole         = 4
)

// vsphereFiles answers the calls the lab plays from the datastore's files: QueryChangedDiskAreas
// here, snapshots and change tracking in snapshots.go and cbt.go.
type vsphereFiles struct {
	reg   *simulator.Registry
	dsDir func() string
	locks sync.Map // VM moref value → *sync.RWMutex: a VM's snapshot and tracking changes, one at a time
}

// vmLock serialises the lab's work on one VM's files (vcsim's own lock is not held meanwhile:
// copying a disk must not stall every other call on the VM).
func (v *vsphereFiles) vmLock(vm types.ManagedObjectReference) *sync.RWMutex {
	mu, _ := v.locks.LoadOrStore(vm.Value, new(sync.RWMutex))
	return mu.(*sync.RWMutex)
}

// withLock runs f under vcsim's lock of obj, on behalf of a context of its own.
func (v *vsphereFiles) withLock(obj mo.Reference, f func()) {
	v.reg.WithLock(&simulator.Context{Map: v.reg, Context: context.Background()}, obj, f)
}

// update tells vcsim (and its property collectors) that obj's properties changed; under obj's lock.
func (v *vsphereFiles) update(obj mo.Reference, changes []types.PropertyChange) {
	v.reg.Update(&simulator.Context{Map: v.reg, Context: context.Background()}, obj, changes)
}

// local is the lab's file for a datastore path.
func (v *vsphereFiles) local(dsPath string) (string, bool) {
	i := strings.Index(dsPath, "] ")
	if i < 0 {
		return "", false
	}
	return filepath.Join(v.dsDir(), filepath.FromSlash(dsPath[i+2:])), true
}

// qcdaFault is a vSphere fault: its type, message and detail fields (XML).
type qcdaFault struct {
	kind, msg, fields string
}

// The calls the lab answers (or follows) in front of vcsim: a request naming none of them goes
// straight on without being decoded.
var labMethods = [][]byte{
	[]byte("QueryChangedDiskAreas"), []byte("CreateSnapshot"), []byte("RemoveSnapshot_Task"),
	[]byte("RemoveAllSnapshots_Task"), []byte("ReconfigVM_Task"),
}

// changedAreasSOAP answers QueryChangedDiskAreas calls to /sdk, follows the snapshot and
// change-tracking calls (snapshots.go), and passes everything else on. alive tells whether a
// vmware_soap_session cookie belongs to a live session.
func changedAreasSOAP(next http.Handler, reg *simulator.Registry, dsDir func() string, alive func(*http.Cookie) bool) http.Handler {
	v := &vsphereFiles{reg: reg, dsDir: dsDir}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/sdk") {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !slices.ContainsFunc(labMethods, func(m []byte) bool { return bytes.Contains(body, m) }) {
			replayTo(next, w, r, body)
			return
		}
		method, err := simulator.UnmarshalBody(types.TypeFunc(), body)
		if err != nil {
			replayTo(next, w, r, body)
			return
		}
		ck, err := r.Cookie("vmware_soap_session")
		authenticated := err == nil && alive(ck)
		switch req := method.Body.(type) {
		case *types.QueryChangedDiskAreas:
			if !authenticated {
				writeFault(w, &qcdaFault{"NotAuthenticated", "not authenticated",
					"<privilegeId>System.View</privilegeId>"})
				return
			}
			v.queryChangedDiskAreas(w, req)
			return
		case *types.CreateSnapshot_Task:
			if authenticated {
				v.createSnapshot(w, r, body, next, "CreateSnapshot_Task", req.This)
				return
			}
		case *types.CreateSnapshotEx_Task:
			if authenticated {
				v.createSnapshot(w, r, body, next, "CreateSnapshotEx_Task", req.This)
				return
			}
		case *types.RemoveSnapshot_Task:
			if s, ok := reg.Get(req.This).(*simulator.VirtualMachineSnapshot); ok && authenticated {
				var vm types.ManagedObjectReference
				v.withLock(s, func() { vm = s.Vm })
				v.removeSnapshots(w, r, body, next, vm, &req.This, req.RemoveChildren)
				return
			}
		case *types.RemoveAllSnapshots_Task:
			if authenticated {
				v.removeSnapshots(w, r, body, next, req.This, nil, true)
				return
			}
		case *types.ReconfigVM_Task:
			if authenticated && req.Spec.ChangeTrackingEnabled != nil {
				v.reconfigure(w, r, body, next, req.This)
				return
			}
		}
		// Not the lab's: vcsim answers, faults (NotAuthenticated, ...) included.
		replayTo(next, w, r, body)
	})
}

func replayTo(next http.Handler, w http.ResponseWriter, r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	next.ServeHTTP(w, r)
}

func (v *vsphereFiles) queryChangedDiskAreas(w http.ResponseWriter, req *types.QueryChangedDiskAreas) {
	vm, ok := v.reg.Get(req.This).(*simulator.VirtualMachine)
	if !ok {
		writeFault(w, &qcdaFault{"ManagedObjectNotFound", "managed object not found: " + req.This.Value,
			fmt.Sprintf("<obj type=%q>%s</obj>", req.This.Type, req.This.Value)})
		return
	}
	mu := v.vmLock(req.This)
	mu.RLock()
	info, fault := v.answer(vm, req)
	mu.RUnlock()
	if fault != nil {
		writeFault(w, fault)
		return
	}
	var areas strings.Builder
	for _, a := range info.ChangedArea {
		fmt.Fprintf(&areas, "<changedArea><start>%d</start><length>%d</length></changedArea>", a.Start, a.Length)
	}
	writeEnvelope(w, http.StatusOK, fmt.Sprintf(
		`<QueryChangedDiskAreasResponse xmlns="urn:vim25"><returnval><startOffset>%d</startOffset><length>%d</length>%s</returnval></QueryChangedDiskAreasResponse>`,
		info.StartOffset, info.Length, areas.String()))
}

func writeEnvelope(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>%s</soapenv:Body></soapenv:Envelope>`, body)
}

func writeFault(w http.ResponseWriter, f *qcdaFault) {
	var msg bytes.Buffer
	_ = xml.EscapeText(&msg, []byte(f.msg))
	writeEnvelope(w, http.StatusInternalServerError, fmt.Sprintf(
		`<soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>%s</faultstring><detail><%sFault xmlns="urn:vim25" xsi:type="%s">%s</%sFault></detail></soapenv:Fault>`,
		msg.String(), f.kind, f.kind, f.fields, f.kind))
}

// answer is QueryChangedDiskAreas on vm. It reads vcsim's objects under their locks and the
// files outside them.
func (v *vsphereFiles) answer(vm *simulator.VirtualMachine, req *types.QueryChangedDiskAreas) (types.DiskChangeInfo, *qcdaFault) {
	var none types.DiskChangeInfo
	var power types.VirtualMachinePowerState
	var cbt bool
	var current []diskView
	v.withLock(vm, func() {
		power, cbt = vm.Runtime.PowerState, trackingOn(vm)
		current = disksOf(vm.Config.Hardware.Device)
	})
	disks := current
	if req.Snapshot != nil {
		s, ok := v.reg.Get(*req.Snapshot).(*simulator.VirtualMachineSnapshot)
		if !ok {
			return none, &qcdaFault{"ManagedObjectNotFound", "managed object not found: " + req.Snapshot.Value,
				fmt.Sprintf("<obj type=\"VirtualMachineSnapshot\">%s</obj>", req.Snapshot.Value)}
		}
		var owner types.ManagedObjectReference
		v.withLock(s, func() {
			owner = s.Vm
			disks = disksOf(s.Config.Hardware.Device)
		})
		// Another VM's snapshot: the API reference lists no fault of its own for this, so the
		// lab refuses the parameter as vSphere refuses one it cannot use (vmodl.fault.
		// InvalidArgument, "A specified parameter was not correct: snapshot"). Not checked
		// against a live vCenter.
		if owner != vm.Self {
			return none, &qcdaFault{"InvalidArgument", "A specified parameter was not correct: snapshot",
				"<invalidProperty>snapshot</invalidProperty>"}
		}
	} else if power != types.VirtualMachinePowerStatePoweredOff {
		return none, &qcdaFault{"InvalidPowerState", "the VM must be powered off when no snapshot is given",
			fmt.Sprintf("<requestedState>poweredOff</requestedState><existingState>%s</existingState>", power)}
	}
	if !cbt {
		return none, &qcdaFault{"FileFault", "change tracking is not enabled on the virtual machine",
			fmt.Sprintf("<file>%s</file>", vm.Name)}
	}
	target, ok := diskByKey(disks, req.DeviceKey)
	if !ok {
		return none, &qcdaFault{"InvalidArgument", "no disk with this key", "<invalidProperty>deviceKey</invalidProperty>"}
	}
	capacity := target.capacity
	if req.StartOffset < 0 || req.StartOffset > capacity {
		return none, &qcdaFault{"InvalidArgument", "startOffset is past the disk", "<invalidProperty>startOffset</invalidProperty>"}
	}
	if req.ChangeId == "*" {
		return page(v.allocated(target.fileName, capacity), req.StartOffset, capacity), nil
	}
	if _, _, ok := parseChangeID(req.ChangeId); !ok {
		return none, &qcdaFault{"InvalidArgument", "A specified parameter was not correct: changeId",
			"<invalidProperty>changeId</invalidProperty>"}
	}
	// The disk's history is kept beside the VM's current disk; the target is what the snapshot
	// froze, or (no snapshot) the current disk itself.
	live, okLive := diskByKey(current, req.DeviceKey)
	liveLocal, okLocal := v.local(live.fileName)
	var then *digests
	var err error = errUnknownChangeID
	if okLive && okLocal {
		then, err = recordOf(liveLocal, req.ChangeId)
	}
	if err != nil {
		// An id this disk's tracking never gave, or gave before it was reset: vSphere answers a
		// FileFault on the disk ("Error caused by file ...", message
		// vim.hostd.vmsvc.cbt.cannotGetChanges), after which callers read the whole disk.
		if !errors.Is(err, errUnknownChangeID) {
			log.Printf("ferry-lab: change id %q of %s: %v", req.ChangeId, live.fileName, err)
		}
		return none, cannotGetChanges(cmp.Or(live.fileName, target.fileName), req.ChangeId)
	}
	var now *digests
	if req.Snapshot != nil && target.changeID != "" {
		// A frozen disk never changes: its own id's record is what it holds.
		now, _ = recordOf(liveLocal, target.changeID)
	}
	if now == nil {
		local, ok := v.local(target.fileName)
		if !ok {
			return none, cannotGetChanges(target.fileName, req.ChangeId)
		}
		if now, err = diskDigests(local, capacity); err != nil {
			log.Printf("ferry-lab: reading %s: %v", target.fileName, err)
			return none, cannotGetChanges(target.fileName, req.ChangeId)
		}
	}
	return page(changedBlocks(then, now, capacity), req.StartOffset, capacity), nil
}

func cannotGetChanges(file, changeID string) *qcdaFault {
	var f bytes.Buffer
	_ = xml.EscapeText(&f, []byte(file))
	var id bytes.Buffer
	_ = xml.EscapeText(&id, []byte(changeID))
	return &qcdaFault{"FileFault", "Error caused by file " + file, fmt.Sprintf(
		"<faultMessage><key>vim.hostd.vmsvc.cbt.cannotGetChanges</key><message>Cannot compute changes since change id %s for disk %s.</message></faultMessage><file>%s</file>",
		id.String(), f.String(), f.String())}
}

// page is the part of areas from startOffset on that one answer carries: at most 64 areas, the
// answer's length cut at the end of the last one when there are more (the caller asks again
// from startOffset+length, as the API reference says).
func page(areas []types.DiskChangeExtent, startOffset, capacity int64) types.DiskChangeInfo {
	info := types.DiskChangeInfo{StartOffset: startOffset, Length: capacity - startOffset}
	for _, a := range areas {
		if a.Start+a.Length <= startOffset {
			continue
		}
		if len(info.ChangedArea) == maxAreasPerReply {
			last := info.ChangedArea[len(info.ChangedArea)-1]
			info.Length = last.Start + last.Length - startOffset
			break
		}
		if a.Start < startOffset {
			a.Length -= startOffset - a.Start
			a.Start = startOffset
		}
		info.ChangedArea = append(info.ChangedArea, a)
	}
	return info
}

// allocated returns the areas of the disk that hold data, in 1 MiB blocks.
func (v *vsphereFiles) allocated(dsPath string, capacity int64) []types.DiskChangeExtent {
	whole := []types.DiskChangeExtent{{Start: 0, Length: capacity}}
	local, ok := v.local(dsPath)
	if !ok {
		return whole
	}
	flat, offset, ok := singleFlatExtent(local)
	if !ok {
		return whole
	}
	f, err := os.Open(filepath.Join(filepath.Dir(local), flat))
	if err != nil {
		return whole
	}
	defer f.Close()
	blocks, err := dataBlocks(f, offset, capacity)
	if err != nil {
		return whole
	}
	return blockAreas(blocks, capacity)
}

// singleFlatExtent reads a text descriptor naming exactly one FLAT or VMFS extent: its file and
// byte offset.
func singleFlatExtent(descriptor string) (string, int64, bool) {
	name, offset, _, ok := flatExtent(descriptor)
	return name, offset, ok
}

// flatExtent is singleFlatExtent with the extent's size in bytes.
func flatExtent(descriptor string) (name string, offset, size int64, ok bool) {
	f, err := os.Open(descriptor)
	if err != nil {
		return "", 0, 0, false
	}
	defer f.Close()
	head := make([]byte, 21)
	if n, _ := f.Read(head); n < 21 || string(head) != "# Disk DescriptorFile" {
		return "", 0, 0, false
	}
	_, _ = f.Seek(0, 0)
	count := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) < 3 || (w[0] != "RW" && w[0] != "RDONLY") {
			continue
		}
		count++
		kind := strings.ToUpper(w[2])
		if kind != "FLAT" && kind != "VMFS" {
			return "", 0, 0, false
		}
		sectors, err := strconv.ParseInt(w[1], 10, 64)
		if err != nil {
			return "", 0, 0, false
		}
		size = sectors * 512
		line := sc.Text()
		q1 := strings.Index(line, "\"")
		q2 := strings.LastIndex(line, "\"")
		if q1 < 0 || q2 <= q1 {
			return "", 0, 0, false
		}
		name = line[q1+1 : q2]
		if rest := strings.TrimSpace(line[q2+1:]); rest != "" {
			sectors, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return "", 0, 0, false
			}
			offset = sectors * 512
		}
	}
	return name, offset, size, count == 1 && name != ""
}
