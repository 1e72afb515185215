package main

// QueryChangedDiskAreas for vcsim, which does not implement it. vSphere's production source of a
// disk's allocated areas (VirtualMachine.QueryChangedDiskAreas, change id "*"), played from the
// datastore's own files: the allocated areas of a flat extent are the data ranges of the local
// file (SEEK_DATA/SEEK_HOLE), as VMFS reports the blocks a thin disk has allocated.
//
// Registered through the simulator's method hook (Registry.Handler, consulted by
// simulator.Service.call before dispatching by method name), not by patching vcsim.
//
// As unkind as vSphere (vSphere API reference for QueryChangedDiskAreas; VDDK programming guide,
// "Changed Block Tracking on Virtual Disks"):
//   - without a snapshot it answers only for a powered-off VM (InvalidPowerState otherwise);
//   - change tracking must be enabled on the VM (FileFault otherwise);
//   - only change id "*" (every allocated area) is known to the lab (InvalidArgument otherwise);
//   - areas are reported in whole 1 MiB VMFS blocks, and at most 64 areas per answer: callers
//     must ask again from startOffset+length, as the API says;
//   - a disk that is not a single flat extent is reported as one area covering it all ("on
//     other storage types ... returns a single extent covering the entire disk").

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	vmfsBlock        = 1 << 20
	maxAreasPerReply = 64
	seekData         = 3
	seekHole         = 4
)

// changedAreas stands in for one VirtualMachine during a QueryChangedDiskAreas call.
type changedAreas struct {
	vm    *simulator.VirtualMachine
	dsDir string
}

func (c *changedAreas) Reference() types.ManagedObjectReference { return c.vm.Self }

// installChangedAreas makes reg answer QueryChangedDiskAreas on every VirtualMachine.
func installChangedAreas(reg *simulator.Registry, dsDir func() string) {
	reg.Handler = func(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
		if m.Name != "QueryChangedDiskAreas" {
			return nil, nil
		}
		vm, ok := ctx.Map.Get(m.This).(*simulator.VirtualMachine)
		if !ok {
			return nil, nil
		}
		return &changedAreas{vm: vm, dsDir: dsDir()}, nil
	}
}

func (c *changedAreas) QueryChangedDiskAreas(ctx *simulator.Context, req *types.QueryChangedDiskAreas) soap.HasFault {
	body := &methods.QueryChangedDiskAreasBody{}
	fail := func(msg string, f types.BaseMethodFault) soap.HasFault {
		body.Fault_ = simulator.Fault(msg, f)
		return body
	}
	vm := c.vm
	if req.Snapshot != nil {
		return fail("the lab answers for the current state of a powered-off VM only", &types.NotSupported{})
	}
	if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		return fail("the VM must be powered off when no snapshot is given", &types.InvalidPowerState{
			RequestedState: types.VirtualMachinePowerStatePoweredOff,
			ExistingState:  vm.Runtime.PowerState,
		})
	}
	if vm.Config == nil || vm.Config.ChangeTrackingEnabled == nil || !*vm.Config.ChangeTrackingEnabled {
		return fail("change tracking is not enabled on the virtual machine", &types.FileFault{File: vm.Name})
	}
	if req.ChangeId != "*" {
		return fail("the lab knows only change id \"*\"", &types.InvalidArgument{InvalidProperty: "changeId"})
	}
	var disk *types.VirtualDisk
	for _, d := range vm.Config.Hardware.Device {
		if vd, ok := d.(*types.VirtualDisk); ok && vd.Key == req.DeviceKey {
			disk = vd
		}
	}
	if disk == nil {
		return fail("no disk with this key", &types.InvalidArgument{InvalidProperty: "deviceKey"})
	}
	capacity := disk.CapacityInBytes
	if capacity == 0 {
		capacity = disk.CapacityInKB * 1024
	}
	if req.StartOffset < 0 || req.StartOffset > capacity {
		return fail("startOffset is past the disk", &types.InvalidArgument{InvalidProperty: "startOffset"})
	}
	fb, ok := disk.Backing.(types.BaseVirtualDeviceFileBackingInfo)
	if !ok {
		return fail("the disk has no file backing", &types.InvalidArgument{InvalidProperty: "deviceKey"})
	}
	areas := c.allocated(fb.GetVirtualDeviceFileBackingInfo().FileName, capacity)
	info := types.DiskChangeInfo{StartOffset: req.StartOffset, Length: capacity - req.StartOffset}
	for _, a := range areas {
		if a.Start+a.Length <= req.StartOffset {
			continue
		}
		if len(info.ChangedArea) == maxAreasPerReply {
			// Cut the answer at the end of the last area given; the caller asks again.
			last := info.ChangedArea[len(info.ChangedArea)-1]
			info.Length = last.Start + last.Length - req.StartOffset
			break
		}
		if a.Start < req.StartOffset {
			a.Length -= req.StartOffset - a.Start
			a.Start = req.StartOffset
		}
		info.ChangedArea = append(info.ChangedArea, a)
	}
	body.Res = &types.QueryChangedDiskAreasResponse{Returnval: info}
	return body
}

// allocated returns the areas of the disk that hold data, in 1 MiB blocks.
func (c *changedAreas) allocated(dsPath string, capacity int64) []types.DiskChangeExtent {
	whole := []types.DiskChangeExtent{{Start: 0, Length: capacity}}
	i := strings.Index(dsPath, "] ")
	if i < 0 {
		return whole
	}
	local := filepath.Join(c.dsDir, filepath.FromSlash(dsPath[i+2:]))
	flat, offset, ok := singleFlatExtent(local)
	if !ok {
		return whole
	}
	f, err := os.Open(filepath.Join(filepath.Dir(local), flat))
	if err != nil {
		return whole
	}
	defer f.Close()
	fd := int(f.Fd())
	var out []types.DiskChangeExtent
	pos := offset
	end := offset + capacity
	for pos < end {
		data, err := syscall.Seek(fd, pos, seekData)
		if err != nil || data >= end {
			break // ENXIO: no data past pos
		}
		hole, err := syscall.Seek(fd, data, seekHole)
		if err != nil || hole > end {
			hole = end
		}
		start := (data - offset) / vmfsBlock * vmfsBlock
		stop := (hole - offset + vmfsBlock - 1) / vmfsBlock * vmfsBlock
		if stop > capacity {
			stop = capacity
		}
		if n := len(out); n > 0 && out[n-1].Start+out[n-1].Length >= start {
			out[n-1].Length = stop - out[n-1].Start
		} else {
			out = append(out, types.DiskChangeExtent{Start: start, Length: stop - start})
		}
		pos = hole
	}
	return out
}

// singleFlatExtent reads a text descriptor naming exactly one FLAT or VMFS extent: its file and
// byte offset.
func singleFlatExtent(descriptor string) (string, int64, bool) {
	f, err := os.Open(descriptor)
	if err != nil {
		return "", 0, false
	}
	defer f.Close()
	head := make([]byte, 21)
	if n, _ := f.Read(head); n < 21 || string(head) != "# Disk DescriptorFile" {
		return "", 0, false
	}
	_, _ = f.Seek(0, 0)
	var name string
	var offset int64
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
			return "", 0, false
		}
		line := sc.Text()
		q1 := strings.Index(line, "\"")
		q2 := strings.LastIndex(line, "\"")
		if q1 < 0 || q2 <= q1 {
			return "", 0, false
		}
		name = line[q1+1 : q2]
		if rest := strings.TrimSpace(line[q2+1:]); rest != "" {
			sectors, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return "", 0, false
			}
			offset = sectors * 512
		}
	}
	return name, offset, count == 1 && name != ""
}
