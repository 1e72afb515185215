package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

func TestToolsChangesFollowTheSettingAndThePower(t *testing.T) {
	cases := []struct {
		setting     string
		on          bool
		status      types.VirtualMachineToolsStatus
		running     types.VirtualMachineToolsRunningStatus
		keepsVcsims bool
	}{
		{"running", true, types.VirtualMachineToolsStatusToolsOk, types.VirtualMachineToolsRunningStatusGuestToolsRunning, false},
		{"running", false, types.VirtualMachineToolsStatusToolsNotRunning, types.VirtualMachineToolsRunningStatusGuestToolsNotRunning, false},
		{"not-running", true, types.VirtualMachineToolsStatusToolsNotRunning, types.VirtualMachineToolsRunningStatusGuestToolsNotRunning, false},
		{"not-installed", true, types.VirtualMachineToolsStatusToolsNotInstalled, types.VirtualMachineToolsRunningStatusGuestToolsNotRunning, false},
		{"", true, "", "", true},
	}
	for _, c := range cases {
		got := toolsChanges(c.setting, c.on)
		if c.keepsVcsims {
			if got != nil {
				t.Errorf("%q: want vcsim's own state, got %v", c.setting, got)
			}
			continue
		}
		if got[0].Val != c.status || got[1].Val != string(c.running) {
			t.Errorf("%q on=%v: got %v", c.setting, c.on, got)
		}
	}
}

// A shaped VM reports Tools while on, obeys or ignores ShutdownGuest as told, and without Tools
// ShutdownGuest is refused as vCenter refuses it.
func TestShapedGuestsAnswerShutdownLikeVCenter(t *testing.T) {
	ctx := context.Background()
	model := simulator.VPX()
	defer model.Remove()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	installGuestBehaviour(model)
	srv := model.Service.NewServer()
	defer srv.Close()
	srv.Config.Handler = ignoringGuests(model, model.Service.ServeMux)
	c, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	vms, err := find.NewFinder(c.Client, true).VirtualMachineList(ctx, "/DC0/vm/*")
	if err != nil || len(vms) < 3 {
		t.Fatalf("need 3 VMs: %v %v", vms, err)
	}
	reconfigure := func(vm *object.VirtualMachine, pairs ...string) {
		spec := types.VirtualMachineConfigSpec{}
		for i := 0; i+1 < len(pairs); i += 2 {
			spec.ExtraConfig = append(spec.ExtraConfig, &types.OptionValue{Key: pairs[i], Value: pairs[i+1]})
		}
		task, err := vm.Reconfigure(ctx, spec)
		if err == nil {
			err = task.Wait(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	state := func(vm *object.VirtualMachine) (types.VirtualMachinePowerState, string) {
		var o mo.VirtualMachine
		if err := vm.Properties(ctx, vm.Reference(), []string{"runtime.powerState", "guest.toolsRunningStatus"}, &o); err != nil {
			t.Fatal(err)
		}
		return o.Runtime.PowerState, o.Guest.ToolsRunningStatus
	}
	obeys, ignores, bare := vms[0], vms[1], vms[2]
	reconfigure(obeys, labToolsKey, "running")
	reconfigure(ignores, labToolsKey, "running", labShutdownKey, "ignore")

	if p, tools := state(obeys); p != types.VirtualMachinePowerStatePoweredOn || tools != "guestToolsRunning" {
		t.Fatalf("shaped VM: %s %s", p, tools)
	}
	if err := obeys.ShutdownGuest(ctx); err != nil {
		t.Fatal(err)
	}
	if p, tools := state(obeys); p != types.VirtualMachinePowerStatePoweredOff || tools != "guestToolsNotRunning" {
		t.Fatalf("after a shutdown: %s %s", p, tools)
	}
	if err := ignores.ShutdownGuest(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := state(ignores); p != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("a guest that ignores the shutdown stays on: %s", p)
	}
	err = bare.ShutdownGuest(ctx)
	if err == nil {
		t.Fatal("ShutdownGuest without Tools must fail")
	}
	if !soap.IsSoapFault(err) {
		t.Fatalf("want a SOAP fault, got %v", err)
	}
	if _, ok := soap.ToSoapFault(err).VimFault().(types.ToolsUnavailable); !ok {
		t.Fatalf("want ToolsUnavailable, got %#v", soap.ToSoapFault(err).VimFault())
	}
	if p, _ := state(bare); p != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("a refused shutdown leaves the VM on: %s", p)
	}
}

// `ferry-lab shape` changes a VM through ReconfigVM_Task the way the controller's tests need.
func TestShapeReconfiguresAVMThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	model := simulator.VPX()
	defer model.Remove()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	installGuestBehaviour(model)
	srv := model.Service.NewServer()
	defer srv.Close()
	dir := t.TempDir()
	pass, _ := srv.URL.User.Password()
	labJSON := fmt.Sprintf(`{"vcenter": {"url": %q, "username": %q, "password": %q}}`,
		(&url.URL{Scheme: srv.URL.Scheme, Host: srv.URL.Host, Path: "/sdk"}).String(), srv.URL.User.Username(), pass)
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte(labJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	s := shapeSpec{
		vm: "DC0_H0_VM1", firmware: "efi", secureBoot: true, cpus: 4, coresPerSocket: 2, memoryMiB: 2048,
		nicType: "vmxnet3", diskController: "sata", tools: "running", guestID: "rhel9_64Guest",
	}
	c, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := find.NewFinder(c.Client, true).VirtualMachine(ctx, "/DC0/vm/DC0_H0_VM1")
	if err != nil {
		t.Fatal(err)
	}
	before, err := vm.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mac := before.SelectByType((*types.VirtualEthernetCard)(nil))[0].(types.BaseVirtualEthernetCard).GetVirtualEthernetCard().MacAddress
	if err := shape(ctx, dir, s); err != nil {
		t.Fatal(err)
	}
	var o mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config", "guest"}, &o); err != nil {
		t.Fatal(err)
	}
	if o.Config.Firmware != "efi" || o.Config.BootOptions == nil || !*o.Config.BootOptions.EfiSecureBootEnabled {
		t.Errorf("firmware %q, boot options %+v", o.Config.Firmware, o.Config.BootOptions)
	}
	if o.Config.Hardware.NumCPU != 4 || *o.Config.Hardware.NumCoresPerSocket != 2 || o.Config.Hardware.MemoryMB != 2048 {
		t.Errorf("hardware %+v", o.Config.Hardware)
	}
	if o.Config.GuestId != "rhel9_64Guest" || o.Guest.ToolsRunningStatus != "guestToolsRunning" {
		t.Errorf("guest %q tools %q", o.Config.GuestId, o.Guest.ToolsRunningStatus)
	}
	devices := object.VirtualDeviceList(o.Config.Hardware.Device)
	nics := devices.SelectByType((*types.VirtualEthernetCard)(nil))
	if len(nics) != 1 {
		t.Fatalf("NICs: %v", nics)
	}
	if _, ok := nics[0].(*types.VirtualVmxnet3); !ok || nics[0].(types.BaseVirtualEthernetCard).GetVirtualEthernetCard().MacAddress != mac {
		t.Errorf("NIC %T, MAC kept %q", nics[0], mac)
	}
	// The powered-on VM's new card has the slot ESXi would give it (ens192 in a Linux guest).
	if slot, ok := nics[0].GetVirtualDevice().SlotInfo.(*types.VirtualDevicePciBusSlotInfo); !ok || slot.PciSlotNumber != 192 {
		t.Errorf("NIC's slot: %#v, want PCI slot 192", nics[0].GetVirtualDevice().SlotInfo)
	}
	for _, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
		ctrl := devices.FindByKey(d.GetVirtualDevice().ControllerKey)
		if _, ok := ctrl.(*types.VirtualAHCIController); !ok {
			t.Errorf("disk on %T, want SATA", ctrl)
		}
	}
}

// `ferry-lab shape --add-disk unreadable` adds a second disk that vcsim counts and answers
// without a value the API requires (what makes it unreadable to a strict client).
func TestShapeAddsADiskAnsweredWithoutAValueTheAPIRequires(t *testing.T) {
	ctx := context.Background()
	model := simulator.VPX()
	defer model.Remove()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	srv := model.Service.NewServer()
	defer srv.Close()
	dir := t.TempDir()
	pass, _ := srv.URL.User.Password()
	labJSON := fmt.Sprintf(`{"vcenter": {"url": %q, "username": %q, "password": %q}}`,
		(&url.URL{Scheme: srv.URL.Scheme, Host: srv.URL.Host, Path: "/sdk"}).String(), srv.URL.User.Username(), pass)
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte(labJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := shape(ctx, dir, shapeSpec{vm: "DC0_H0_VM1", addDisk: "unreadable"}); err != nil {
		t.Fatal(err)
	}
	c, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := find.NewFinder(c.Client, true).VirtualMachine(ctx, "/DC0/vm/DC0_H0_VM1")
	if err != nil {
		t.Fatal(err)
	}
	var o mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.hardware.device", "summary.config.numVirtualDisks"}, &o); err != nil {
		t.Fatal(err)
	}
	disks := object.VirtualDeviceList(o.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil))
	if len(disks) != 2 {
		t.Fatalf("disks: %d", len(disks))
	}
	added := disks[1].(*types.VirtualDisk)
	info, ok := added.DeviceInfo.(*types.ExtendedElementDescription)
	if !ok || info.Label != "Hard disk 2" || added.ControllerKey != disks[0].GetVirtualDevice().ControllerKey {
		t.Fatalf("added disk %+v, deviceInfo %T", added.VirtualDevice, added.DeviceInfo)
	}
	if _, ok := added.Backing.(*types.VirtualDiskFlatVer2BackingInfo); !ok {
		t.Errorf("backing %T", added.Backing)
	}
	answer, err := xml.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(answer, []byte("<messageArg><key>reason</key></messageArg>")) {
		t.Errorf("the description as vcsim answers it: %s", answer)
	}
	if o.Summary.Config.NumVirtualDisks != 2 {
		t.Errorf("numVirtualDisks %d, want both disks counted", o.Summary.Config.NumVirtualDisks)
	}
}

// `ferry-lab shape` makes what preflight must find: a snapshot, independent and multi-writer
// disks with an encryption key id, host devices passed through and changed block tracking off
// — each as vSphere's API reports it afterwards.
func TestShapeMakesWhatPreflightMustFind(t *testing.T) {
	ctx := context.Background()
	model := simulator.VPX()
	defer model.Remove()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	srv := model.Service.NewServer()
	defer srv.Close()
	dir := t.TempDir()
	pass, _ := srv.URL.User.Password()
	labJSON := fmt.Sprintf(`{"vcenter": {"url": %q, "username": %q, "password": %q}}`,
		(&url.URL{Scheme: srv.URL.Scheme, Host: srv.URL.Host, Path: "/sdk"}).String(), srv.URL.User.Username(), pass)
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), []byte(labJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []shapeSpec{
		{vm: "DC0_H0_VM0", diskMode: "independent_persistent", multiWriter: true, encrypted: true, passthrough: "usb"},
		{vm: "DC0_H0_VM0", passthrough: "pci", snapshot: "before-the-window", cbt: "off"},
	} {
		if err := shape(ctx, dir, s); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
	}
	c, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := find.NewFinder(c.Client, true).VirtualMachine(ctx, "/DC0/vm/DC0_H0_VM0")
	if err != nil {
		t.Fatal(err)
	}
	var o mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config", "rootSnapshot"}, &o); err != nil {
		t.Fatal(err)
	}
	if len(o.RootSnapshot) != 1 {
		t.Errorf("root snapshots: %v", o.RootSnapshot)
	}
	if cbt := o.Config.ChangeTrackingEnabled; cbt == nil || *cbt {
		t.Errorf("changeTrackingEnabled %v, want false", cbt)
	}
	devices := object.VirtualDeviceList(o.Config.Hardware.Device)
	for _, d := range devices.SelectByType((*types.VirtualDisk)(nil)) {
		b, ok := d.GetVirtualDevice().Backing.(*types.VirtualDiskFlatVer2BackingInfo)
		if !ok {
			t.Fatalf("backing %T", d.GetVirtualDevice().Backing)
		}
		if b.DiskMode != "independent_persistent" || b.Sharing != "sharingMultiWriter" || b.KeyId == nil {
			t.Errorf("disk mode %q sharing %q key %+v", b.DiskMode, b.Sharing, b.KeyId)
		}
	}
	if n := len(devices.SelectByType((*types.VirtualUSB)(nil))); n != 1 {
		t.Errorf("USB devices: %d", n)
	}
	if n := len(devices.SelectByType((*types.VirtualPCIPassthrough)(nil))); n != 1 {
		t.Errorf("PCI passthrough devices: %d", n)
	}

	// A raw device mapping: the disk's backing becomes the mapping of a LUN.
	if err := shape(ctx, dir, shapeSpec{vm: "DC0_H0_VM1", rdm: true}); err != nil {
		t.Fatal(err)
	}
	vm, err = find.NewFinder(c.Client, true).VirtualMachine(ctx, "/DC0/vm/DC0_H0_VM1")
	if err != nil {
		t.Fatal(err)
	}
	o = mo.VirtualMachine{}
	if err := vm.Properties(ctx, vm.Reference(), []string{"config"}, &o); err != nil {
		t.Fatal(err)
	}
	for _, d := range object.VirtualDeviceList(o.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
		b, ok := d.GetVirtualDevice().Backing.(*types.VirtualDiskRawDiskMappingVer1BackingInfo)
		if !ok || b.CompatibilityMode != "physicalMode" || b.LunUuid == "" {
			t.Errorf("RDM backing: %T %+v", d.GetVirtualDevice().Backing, b)
		}
	}
}
