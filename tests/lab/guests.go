package main

// Guests as vCenter shows them, where vcsim is kinder:
//
//   - VMware Tools: vcsim reports every VM's Tools as not installed (only its container-backed
//     VMs run them). A VM whose extraConfig has ferry.lab.tools = running reports Tools
//     running (toolsOk / guestToolsRunning) while it is powered on, and not running when off.
//   - ShutdownGuest: vcsim powers the VM off whether or not Tools run. vCenter refuses without
//     running Tools (fault ToolsUnavailable), and a guest may ignore the request: a VM whose
//     extraConfig has ferry.lab.guestShutdown = ignore stays on.
//
// Tests shape their VM through the vSphere API (ReconfigVM_Task), with `ferry-lab shape`:
// firmware and Secure Boot, CPU topology, memory, NIC device type, disk controller, guest id,
// the Tools state and the guest's answer to a shutdown, and a disk a strict client cannot read.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	labToolsKey    = "ferry.lab.tools"         // "running", "not-running", "not-installed"
	labShutdownKey = "ferry.lab.guestShutdown" // "obey" (default) or "ignore"
	// A Go duration: CreateSnapshot_Task on the VM starts that long after it is called
	// (snapshots.go), the time a loaded vCenter takes, in which someone else may act.
	labSnapshotDelayKey = "ferry.lab.snapshotDelay"
)

func extraConfigValue(vm *simulator.VirtualMachine, key string) string {
	if vm.Config == nil {
		return ""
	}
	for _, o := range vm.Config.ExtraConfig {
		if v := o.GetOptionValue(); v != nil && v.Key == key {
			if s, ok := v.Value.(string); ok {
				return s
			}
		}
	}
	return ""
}

// toolsChanges is what guest.toolsStatus / guest.toolsRunningStatus should become for a VM's
// lab Tools setting and power state; nil when the VM keeps vcsim's own.
func toolsChanges(setting string, on bool) []types.PropertyChange {
	status, running := types.VirtualMachineToolsStatusToolsNotRunning, types.VirtualMachineToolsRunningStatusGuestToolsNotRunning
	switch setting {
	case "running":
		if on {
			status, running = types.VirtualMachineToolsStatusToolsOk, types.VirtualMachineToolsRunningStatusGuestToolsRunning
		}
	case "not-running":
	case "not-installed":
		status = types.VirtualMachineToolsStatusToolsNotInstalled
	default:
		return nil
	}
	return []types.PropertyChange{
		{Name: "guest.toolsStatus", Val: status},
		{Name: "guest.toolsRunningStatus", Val: string(running)},
	}
}

// syncTools brings a VM's reported Tools state in line with its lab setting and power state.
func syncTools(ctx *simulator.Context, vm *simulator.VirtualMachine) {
	ctx.WithLock(vm, func() {
		changes := toolsChanges(extraConfigValue(vm, labToolsKey), vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn)
		if changes == nil || vm.Guest == nil {
			return
		}
		if string(vm.Guest.ToolsStatus) == fmt.Sprint(changes[0].Val) && vm.Guest.ToolsRunningStatus == changes[1].Val {
			return
		}
		ctx.Update(vm, changes)
	})
}

// assignPciSlots gives a powered-on VM's network cards the PCI slots ESXi gives them when the
// VM powers on (ethernetN.pciSlotNumber in its .vmx, VirtualDevice.slotInfo in the API), which
// vcsim leaves out of a card added by a reconfiguration (its template's cards carry slot 32). A Linux guest names a card after its slot (systemd's ens192 for slot 192),
// so its network configuration names the slot: ferry keeps the name (issue 46).
func assignPciSlots(ctx *simulator.Context, vm *simulator.VirtualMachine) {
	ctx.WithLock(vm, func() {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || vm.Config == nil {
			return
		}
		i := 0
		for _, d := range vm.Config.Hardware.Device {
			card, ok := d.(types.BaseVirtualEthernetCard)
			if !ok {
				continue
			}
			if nc := card.GetVirtualEthernetCard(); nc.SlotInfo == nil {
				nc.SlotInfo = &types.VirtualDevicePciBusSlotInfo{PciSlotNumber: esxiNicSlot(i)}
			}
			i++
		}
	})
}

// esxiNicSlot is the PCI slot ESXi (virtual hardware 7 and later) usually gives a VM's i-th
// network card: 192, 224, 256 behind the first root ports, then 1184, 1216, ... behind the next.
func esxiNicSlot(i int) int32 {
	if i < 3 {
		return int32(192 + 32*i)
	}
	return int32(1184 + 32*(i-3))
}

var shutdownThis = regexp.MustCompile(`<ShutdownGuest[^>]*>\s*<_this[^>]*>([^<]+)</_this>`)

// shutdownResponse is vCenter's answer to a ShutdownGuest it handed to the guest's Tools.
const shutdownResponse = `<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<soapenv:Body><ShutdownGuestResponse xmlns="urn:vim25"></ShutdownGuestResponse></soapenv:Body>
</soapenv:Envelope>`

// ignoringGuests answers ShutdownGuest for a VM whose guest ignores it (running Tools, lab
// setting ignore) as vCenter does, and leaves the VM on; everything else goes to next. (A
// registry handler cannot do this: vcsim dispatches methods on a session's view of the VM.)
func ignoringGuests(m *simulator.Model, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/sdk" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		match := shutdownThis.FindSubmatch(body)
		if match == nil {
			next.ServeHTTP(w, r)
			return
		}
		ref := types.ManagedObjectReference{Type: "VirtualMachine", Value: string(bytes.TrimSpace(match[1]))}
		vm, ok := m.Map().Get(ref).(*simulator.VirtualMachine)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		var ignore bool
		// A context of its own: the lock is held on behalf of someone.
		lockCtx := &simulator.Context{Context: r.Context(), Map: m.Map()}
		m.Map().WithLock(lockCtx, vm, func() {
			ignore = extraConfigValue(vm, labShutdownKey) == "ignore" &&
				extraConfigValue(vm, labToolsKey) == "running" &&
				vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn
		})
		if !ignore {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		_, _ = io.WriteString(w, shutdownResponse)
	})
}

// installGuestBehaviour makes vcsim answer for Tools, and refuse ShutdownGuest without them.
func installGuestBehaviour(m *simulator.Model) {
	m.Map().Handler = func(ctx *simulator.Context, method *simulator.Method) (mo.Reference, types.BaseMethodFault) {
		switch method.Name {
		case "RetrieveProperties", "RetrievePropertiesEx", "ContinueRetrievePropertiesEx", "WaitForUpdatesEx", "WaitForUpdates":
			// Tools come and go with the power state: bring them in line before anyone reads.
			for _, ref := range ctx.Map.AllReference("VirtualMachine") {
				if vm, ok := ref.(*simulator.VirtualMachine); ok {
					syncTools(ctx, vm)
					assignPciSlots(ctx, vm)
				}
			}
		case "ShutdownGuest":
			vm, ok := ctx.Map.Get(method.This).(*simulator.VirtualMachine)
			if !ok {
				return nil, nil
			}
			syncTools(ctx, vm)
			var on, running bool
			ctx.WithLock(vm, func() {
				on = vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn
				running = vm.Guest != nil && vm.Guest.ToolsRunningStatus == string(types.VirtualMachineToolsRunningStatusGuestToolsRunning)
			})
			if on && !running {
				return nil, new(types.ToolsUnavailable)
			}
		}
		return nil, nil
	}
}

// shapeSpec is what `ferry-lab shape` changes.
type shapeSpec struct {
	vm             string
	name           string
	firmware       string
	secureBoot     bool
	cpus           int
	coresPerSocket int
	memoryMiB      int
	nicType        string
	diskController string
	tools          string
	guestShutdown  string
	guestID        string
	power          string
	addDisk        string
	// What preflight must find (issue 26): a snapshot, each disk's mode and sharing, an
	// encryption key on each disk's backing, a device passed through from the host.
	snapshot    string
	diskMode    string
	multiWriter bool
	encrypted   bool
	rdm         bool
	passthrough string
	cbt         string
	// How long each CreateSnapshot_Task on the VM waits before it starts (a Go duration).
	snapshotDelay string
}

// runShape is `ferry-lab shape --state-dir DIR --vm NAME [changes]`: one ReconfigVM_Task (and a
// power operation) on a VM of the running lab's vcsim, through its SDK URL.
func runShape(args []string) int {
	fs := flag.NewFlagSet("ferry-lab shape", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "the running lab's state directory (holds lab.json)")
	var s shapeSpec
	fs.StringVar(&s.vm, "vm", "", "the VM's inventory name")
	fs.StringVar(&s.name, "name", "", "rename the VM (as vSphere's ReconfigVM_Task does with config.name)")
	fs.StringVar(&s.firmware, "firmware", "", "bios or efi")
	fs.BoolVar(&s.secureBoot, "secure-boot", false, "turn UEFI Secure Boot on (with -firmware efi)")
	fs.IntVar(&s.cpus, "cpus", 0, "number of vCPUs")
	fs.IntVar(&s.coresPerSocket, "cores-per-socket", 0, "cores per socket")
	fs.IntVar(&s.memoryMiB, "memory", 0, "memory in MiB")
	fs.StringVar(&s.nicType, "nic-type", "", "replace every NIC (MAC and network kept) with: vmxnet3, e1000e, e1000, pcnet32")
	fs.StringVar(&s.diskController, "disk-controller", "", "move every disk to a new controller: sata, ide, pvscsi, lsilogic, lsilogic-sas, buslogic, nvme")
	fs.StringVar(&s.tools, "tools", "", "VMware Tools: running, not-running, not-installed")
	fs.StringVar(&s.guestShutdown, "guest-shutdown", "", "what the guest does with ShutdownGuest: obey or ignore")
	fs.StringVar(&s.guestID, "guest-id", "", "guest OS identifier, e.g. windows2019srv_64Guest")
	fs.StringVar(&s.power, "power", "", "on or off, after the changes")
	fs.StringVar(&s.addDisk, "add-disk", "", "add a second disk: unreadable (one a strict client cannot read, see unreadableDisk) or plain (a 16 MiB flat VMDK, as ReconfigVM_Task adds one to a running VM)")
	fs.StringVar(&s.snapshot, "snapshot", "", "take a snapshot of this name (CreateSnapshot_Task), after the changes")
	fs.StringVar(&s.diskMode, "disk-mode", "", "every disk's mode: persistent, independent_persistent, independent_nonpersistent")
	fs.BoolVar(&s.multiWriter, "multi-writer", false, "share every disk with other VMs (sharing: sharingMultiWriter)")
	fs.BoolVar(&s.encrypted, "encrypted", false, "put an encryption key id on every disk's backing (as an encrypted VM's disks carry)")
	fs.BoolVar(&s.rdm, "rdm", false, "turn every disk into a raw device mapping (physical compatibility mode, as a LUN passed to the VM)")
	fs.StringVar(&s.passthrough, "passthrough", "", "pass a host device through: usb or pci")
	fs.StringVar(&s.cbt, "cbt", "", "changed block tracking (config.changeTrackingEnabled): on or off")
	fs.StringVar(&s.snapshotDelay, "snapshot-delay", "", "each CreateSnapshot_Task on the VM starts this long after it is called, e.g. 3s (0s: at once)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || s.vm == "" {
		fmt.Fprintln(os.Stderr, "ferry-lab shape: --state-dir and --vm are required")
		return 2
	}
	if err := shape(context.Background(), *stateDir, s); err != nil {
		fmt.Fprintf(os.Stderr, "ferry-lab shape: %v\n", err)
		return 1
	}
	return 0
}

// labVCenter is the running lab's vCenter, as lab.json describes it.
type labVCenter struct {
	URL          string `json:"url"`
	Username     string `json:"username"`
	Password     string `json:"password"`
	DatastoreDir string `json:"datastoreDir"`
}

// connectLab logs in to the vCenter of the lab whose state directory is stateDir and finds the
// VM named vm in its default datacenter.
func connectLab(ctx context.Context, stateDir, vm string) (*govmomi.Client, labVCenter, *object.VirtualMachine, error) {
	var info struct {
		VCenter labVCenter `json:"vcenter"`
	}
	raw, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		return nil, info.VCenter, nil, err
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return nil, info.VCenter, nil, fmt.Errorf("lab.json: %w", err)
	}
	u, err := url.Parse(info.VCenter.URL)
	if err != nil {
		return nil, info.VCenter, nil, err
	}
	u.User = url.UserPassword(info.VCenter.Username, info.VCenter.Password)
	// The lab's own certificate: this tool only ever talks to the lab it was started with.
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		return nil, info.VCenter, nil, err
	}
	finder := find.NewFinder(c.Client, true)
	dc, err := finder.DefaultDatacenter(ctx)
	if err == nil {
		finder.SetDatacenter(dc)
		var found *object.VirtualMachine
		if found, err = finder.VirtualMachine(ctx, vm); err == nil {
			return c, info.VCenter, found, nil
		}
	}
	_ = c.Logout(context.Background())
	return nil, info.VCenter, nil, err
}

func shape(ctx context.Context, stateDir string, s shapeSpec) error {
	c, _, vm, err := connectLab(ctx, stateDir, s.vm)
	if err != nil {
		return err
	}
	defer c.Logout(context.Background())
	spec, err := shapeConfigSpec(ctx, vm, s)
	if err != nil {
		return err
	}
	task, err := vm.Reconfigure(ctx, spec)
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil {
		return fmt.Errorf("reconfigure %s: %w", s.vm, err)
	}
	var power *object.Task
	switch s.power {
	case "":
	case "on":
		power, err = vm.PowerOn(ctx)
	case "off":
		power, err = vm.PowerOff(ctx)
	default:
		return fmt.Errorf("-power %q: on or off", s.power)
	}
	if err != nil {
		return err
	}
	if power != nil {
		if err := power.Wait(ctx); err != nil {
			if _, ok := err.(types.HasFault); !ok {
				return err
			}
		}
	}
	if s.snapshot != "" {
		task, err := vm.CreateSnapshot(ctx, s.snapshot, "ferry lab", false, false)
		if err != nil {
			return err
		}
		if err := task.Wait(ctx); err != nil {
			return fmt.Errorf("snapshot %s: %w", s.vm, err)
		}
	}
	return nil
}

func shapeConfigSpec(ctx context.Context, vm *object.VirtualMachine, s shapeSpec) (types.VirtualMachineConfigSpec, error) {
	spec := types.VirtualMachineConfigSpec{Name: s.name, Firmware: s.firmware, GuestId: s.guestID}
	if s.secureBoot {
		spec.BootOptions = &types.VirtualMachineBootOptions{EfiSecureBootEnabled: types.NewBool(true)}
	}
	switch s.cbt {
	case "":
	case "on", "off":
		spec.ChangeTrackingEnabled = types.NewBool(s.cbt == "on")
	default:
		return spec, fmt.Errorf("-cbt %q: on or off", s.cbt)
	}
	if s.cpus > 0 {
		spec.NumCPUs = int32(s.cpus)
	}
	if s.coresPerSocket > 0 {
		spec.NumCoresPerSocket = types.NewInt32(int32(s.coresPerSocket))
	}
	if s.memoryMiB > 0 {
		spec.MemoryMB = int64(s.memoryMiB)
	}
	if s.snapshotDelay != "" {
		if _, err := time.ParseDuration(s.snapshotDelay); err != nil {
			return spec, fmt.Errorf("-snapshot-delay %q: %w", s.snapshotDelay, err)
		}
	}
	for key, v := range map[string]string{labToolsKey: s.tools, labShutdownKey: s.guestShutdown, labSnapshotDelayKey: s.snapshotDelay} {
		if v != "" {
			spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: key, Value: v})
		}
	}
	diskEdits := s.diskMode != "" || s.multiWriter || s.encrypted || s.rdm
	if s.nicType == "" && s.diskController == "" && s.addDisk == "" && !diskEdits && s.passthrough == "" {
		return spec, nil
	}
	devices, err := vm.Device(ctx)
	if err != nil {
		return spec, err
	}
	if s.nicType != "" {
		for _, d := range devices.SelectByType((*types.VirtualEthernetCard)(nil)) {
			old := d.(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
			card, err := object.EthernetCardTypes().CreateEthernetCard(s.nicType, old.Backing)
			if err != nil {
				return spec, err
			}
			nc := card.(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
			nc.AddressType = string(types.VirtualEthernetCardMacTypeManual)
			nc.MacAddress = old.MacAddress
			spec.DeviceChange = append(spec.DeviceChange,
				&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationRemove, Device: d},
				&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: card})
		}
	}
	if s.diskController != "" {
		var ctrl types.BaseVirtualDevice
		switch s.diskController {
		case "sata":
			ctrl, err = devices.CreateSATAController()
		case "ide":
			ctrl, err = devices.CreateIDEController()
		case "nvme":
			ctrl, err = devices.CreateNVMEController()
		case "pvscsi", "lsilogic", "lsilogic-sas", "buslogic":
			ctrl, err = devices.CreateSCSIController(s.diskController)
		default:
			return spec, fmt.Errorf("-disk-controller %q", s.diskController)
		}
		if err != nil {
			return spec, err
		}
		// A key of its own, negative as new devices' keys are, that the disks can point at.
		ctrl.GetVirtualDevice().Key = -100
		spec.DeviceChange = append(spec.DeviceChange,
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: ctrl})
		for i, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
			disk := d.(*types.VirtualDisk)
			disk.ControllerKey = -100
			disk.UnitNumber = types.NewInt32(int32(i))
			spec.DeviceChange = append(spec.DeviceChange,
				&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: disk})
		}
	}
	if diskEdits {
		for _, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
			disk := d.(*types.VirtualDisk)
			b, ok := disk.Backing.(*types.VirtualDiskFlatVer2BackingInfo)
			if !ok {
				return spec, fmt.Errorf("%s: disk %d is not a flat VMDK (%T)", s.vm, disk.Key, disk.Backing)
			}
			if s.diskMode != "" {
				b.DiskMode = s.diskMode
			}
			if s.multiWriter {
				b.Sharing = string(types.VirtualDiskSharingSharingMultiWriter)
			}
			if s.encrypted {
				b.KeyId = &types.CryptoKeyId{KeyId: "ferry-lab-key", ProviderId: &types.KeyProviderId{Id: "ferry-lab-kms"}}
			}
			if s.rdm {
				// What vSphere reports for an RDM: the mapping file in place of the VMDK, and the
				// LUN it maps (vSphere API reference, VirtualDiskRawDiskMappingVer1BackingInfo).
				disk.Backing = &types.VirtualDiskRawDiskMappingVer1BackingInfo{
					VirtualDeviceFileBackingInfo: b.VirtualDeviceFileBackingInfo,
					LunUuid:                      "0200000000600508b1001c4f3a8e0b4d",
					DeviceName:                   "/vmfs/devices/disks/naa.600508b1001c4f3a8e0b4d",
					CompatibilityMode:            string(types.VirtualDiskCompatibilityModePhysicalMode),
					DiskMode:                     b.DiskMode,
				}
			}
			spec.DeviceChange = append(spec.DeviceChange,
				&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationEdit, Device: disk})
		}
	}
	switch s.passthrough {
	case "":
	case "usb":
		ctrl := &types.VirtualUSBController{VirtualController: types.VirtualController{VirtualDevice: types.VirtualDevice{Key: -300}}}
		usb := &types.VirtualUSB{
			VirtualDevice: types.VirtualDevice{
				Key:           -301,
				ControllerKey: -300,
				Backing: &types.VirtualUSBUSBBackingInfo{
					VirtualDeviceDeviceBackingInfo: types.VirtualDeviceDeviceBackingInfo{DeviceName: "path:1/0/1"},
				},
				DeviceInfo: &types.Description{Label: "USB 1", Summary: "a host's USB device"},
			},
			Connected: true,
		}
		spec.DeviceChange = append(spec.DeviceChange,
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: ctrl},
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: usb})
	case "pci":
		pci := &types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{
			Key:           -302,
			ControllerKey: 100,
			Backing: &types.VirtualPCIPassthroughDeviceBackingInfo{
				VirtualDeviceDeviceBackingInfo: types.VirtualDeviceDeviceBackingInfo{DeviceName: "GPU"},
				Id:                             "0000:3b:00.0", DeviceId: "1eb8", SystemId: "ferry-lab", VendorId: 0x10de,
			},
			DeviceInfo: &types.Description{Label: "PCI device 0", Summary: "a host's PCI device"},
		}}
		spec.DeviceChange = append(spec.DeviceChange,
			&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: pci})
	default:
		return spec, fmt.Errorf("-passthrough %q: usb or pci", s.passthrough)
	}
	if s.addDisk != "" {
		var disk *types.VirtualDisk
		switch s.addDisk {
		case "unreadable":
			disk, err = unreadableDisk(devices, s.vm)
		case "plain":
			disk, err = plainDisk(devices, s.vm)
		default:
			return spec, fmt.Errorf("-add-disk %q: unreadable or plain", s.addDisk)
		}
		if err != nil {
			return spec, err
		}
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation:     types.VirtualDeviceConfigSpecOperationAdd,
			FileOperation: types.VirtualDeviceConfigSpecFileOperationCreate,
			Device:        disk,
		})
	}
	return spec, nil
}

// secondDisk is a new disk "[LocalDS_0] VM/disk2.vmdk" of capacityKB on the first disk's
// controller, with the key of a device to add.
func secondDisk(devices object.VirtualDeviceList, vm string, capacityKB int64) (*types.VirtualDisk, error) {
	disks := devices.SelectByType((*types.VirtualDisk)(nil))
	if len(disks) == 0 {
		return nil, fmt.Errorf("%s has no disk to put a second one beside", vm)
	}
	ctrl, ok := devices.FindByKey(disks[0].GetVirtualDevice().ControllerKey).(types.BaseVirtualController)
	if !ok {
		return nil, fmt.Errorf("the first disk of %s hangs on no controller", vm)
	}
	disk := devices.CreateDisk(ctrl, types.ManagedObjectReference{}, "["+vcDatastore+"] "+vm+"/disk2.vmdk")
	disk.Key = -200
	disk.CapacityInKB = capacityKB
	return disk, nil
}

// plainDisk is a second disk, "Hard disk 2", of 16 MiB, as an administrator adds one with
// ReconfigVM_Task (vcsim creates its file; a test puts real contents behind it).
func plainDisk(devices object.VirtualDeviceList, vm string) (*types.VirtualDisk, error) {
	disk, err := secondDisk(devices, vm, 16<<10)
	if err != nil {
		return nil, err
	}
	disk.DeviceInfo = &types.Description{Label: "Hard disk 2", Summary: "16,384 KB"}
	return disk, nil
}

// unreadableDisk is a second disk, "Hard disk 2" (a real flat VMDK beside the first), whose
// deviceInfo is an ExtendedElementDescription with a message argument that has no value. The API
// requires KeyAnyValue.value and vcsim answers without it (Go leaves a nil value out), so a
// client that reads answers strictly (vim_rs without vcsim_compat) cannot read this device: the
// stand-in for any device a vCenter may answer that ferry cannot read (a newer vSphere's field or
// type, say). vcsim counts it in summary.config.numVirtualDisks, as vCenter counts every disk.
func unreadableDisk(devices object.VirtualDeviceList, vm string) (*types.VirtualDisk, error) {
	disk, err := secondDisk(devices, vm, 1<<10)
	if err != nil {
		return nil, err
	}
	disk.DeviceInfo = &types.ExtendedElementDescription{
		ElementDescription: types.ElementDescription{
			Description: types.Description{Label: "Hard disk 2", Summary: "1,024 KB"},
			Key:         "disk",
		},
		MessageCatalogKeyPrefix: "ferry.lab.disk",
		MessageArg:              []types.KeyAnyValue{{Key: "reason"}},
	}
	return disk, nil
}
