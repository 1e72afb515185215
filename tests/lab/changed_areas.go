package main

// QueryChangedDiskAreas for vcsim, which does not implement it. vSphere's production source of a
// disk's allocated areas (VirtualMachine.QueryChangedDiskAreas, change id "*"), played from the
// datastore's own files: the allocated areas of a flat extent are the data ranges of the local
// file (SEEK_DATA/SEEK_HOLE), as VMFS reports the blocks a thin disk has allocated.
//
// vcsim dispatches a SOAP call by reflection to a method of the managed object's Go type, and
// its method hook (Registry.Handler) cannot stand in for an object a session can see (the
// session's own lookup, which falls back to the shared registry, wins after the hook). So the
// lab answers this one call in front of vcsim's /sdk handler: it decodes the request with
// vcsim's own decoder (simulator.UnmarshalBody), checks the session cookie like /folder does,
// reads the VM from vcsim's registry under its lock, and answers in SOAP.
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
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	vmfsBlock        = 1 << 20
	maxAreasPerReply = 64
	seekData         = 3
	seekHole         = 4
)

// changedAreas answers for one VirtualMachine.
type changedAreas struct {
	vm    *simulator.VirtualMachine
	dsDir string
}

// qcdaFault is a vSphere fault: its type, message and detail fields (XML).
type qcdaFault struct {
	kind, msg, fields string
}

// changedAreasSOAP answers QueryChangedDiskAreas calls to /sdk and passes everything else on.
// alive tells whether a vmware_soap_session cookie belongs to a live session.
func changedAreasSOAP(next http.Handler, reg *simulator.Registry, dsDir func() string, alive func(*http.Cookie) bool) http.Handler {
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
		if !bytes.Contains(body, []byte("QueryChangedDiskAreas")) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			next.ServeHTTP(w, r)
			return
		}
		method, err := simulator.UnmarshalBody(types.TypeFunc(), body)
		req, ok := method.Body.(*types.QueryChangedDiskAreas)
		if err != nil || !ok {
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
			return
		}
		ck, err := r.Cookie("vmware_soap_session")
		if err != nil || !alive(ck) {
			writeFault(w, &qcdaFault{"NotAuthenticated", "not authenticated",
				"<privilegeId>System.View</privilegeId>"})
			return
		}
		vm, ok := reg.Get(req.This).(*simulator.VirtualMachine)
		if !ok {
			writeFault(w, &qcdaFault{"ManagedObjectNotFound", "managed object not found: " + req.This.Value,
				fmt.Sprintf("<obj type=%q>%s</obj>", req.This.Type, req.This.Value)})
			return
		}
		var info types.DiskChangeInfo
		var fault *qcdaFault
		ctx := &simulator.Context{Map: reg, Context: r.Context()}
		reg.WithLock(ctx, vm, func() {
			info, fault = (&changedAreas{vm: vm, dsDir: dsDir()}).answer(req)
		})
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
	})
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

// answer is QueryChangedDiskAreas for c.vm, under the VM's lock.
func (c *changedAreas) answer(req *types.QueryChangedDiskAreas) (types.DiskChangeInfo, *qcdaFault) {
	var none types.DiskChangeInfo
	vm := c.vm
	if req.Snapshot != nil {
		return none, &qcdaFault{"NotSupported", "the lab answers for the current state of a powered-off VM only", ""}
	}
	if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		return none, &qcdaFault{"InvalidPowerState", "the VM must be powered off when no snapshot is given",
			fmt.Sprintf("<requestedState>poweredOff</requestedState><existingState>%s</existingState>", vm.Runtime.PowerState)}
	}
	if vm.Config == nil || vm.Config.ChangeTrackingEnabled == nil || !*vm.Config.ChangeTrackingEnabled {
		return none, &qcdaFault{"FileFault", "change tracking is not enabled on the virtual machine",
			fmt.Sprintf("<file>%s</file>", vm.Name)}
	}
	if req.ChangeId != "*" {
		return none, &qcdaFault{"InvalidArgument", "the lab knows only change id \"*\"", "<invalidProperty>changeId</invalidProperty>"}
	}
	var disk *types.VirtualDisk
	for _, d := range vm.Config.Hardware.Device {
		if vd, ok := d.(*types.VirtualDisk); ok && vd.Key == req.DeviceKey {
			disk = vd
		}
	}
	if disk == nil {
		return none, &qcdaFault{"InvalidArgument", "no disk with this key", "<invalidProperty>deviceKey</invalidProperty>"}
	}
	capacity := disk.CapacityInBytes
	if capacity == 0 {
		capacity = disk.CapacityInKB * 1024
	}
	if req.StartOffset < 0 || req.StartOffset > capacity {
		return none, &qcdaFault{"InvalidArgument", "startOffset is past the disk", "<invalidProperty>startOffset</invalidProperty>"}
	}
	fb, ok := disk.Backing.(types.BaseVirtualDeviceFileBackingInfo)
	if !ok {
		return none, &qcdaFault{"InvalidArgument", "the disk has no file backing", "<invalidProperty>deviceKey</invalidProperty>"}
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
	return info, nil
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
