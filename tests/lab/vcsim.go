package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

const (
	vcDatacenter = "DC0"
	vcDatastore  = "LocalDS_0"
)

type vcsimLab struct {
	model   *simulator.Model
	server  *simulator.Server
	url     string // https://127.0.0.1:PORT/sdk
	dsDir   string // stable datastore directory (DIR/vcsim/LocalDS_0)
	user    string
	pass    string
	vmCount int
}

// vmShape picks the vcsim inventory shape for n VMs: one standalone host DC0_H0 and
// k = ceil(n/500) clusters DC0_C<j> of 3 hosts each; the n VMs are spread evenly over the k+1
// pools (the standalone host's pool and each cluster's root pool "RP0"), named like vcsim's own
// model does: DC0_H0_VM<i>, DC0_C<j>_RP0_VM<i>. vcsim's model would create them one at a time
// (~40 ms each, mostly sleeps in its task polling), so the lab creates them itself, in parallel.
func vmShape(n int) (clusters int) {
	if n <= 0 {
		return 1
	}
	return int(math.Ceil(float64(n) / 500))
}

// startVcsim runs a simulated vCenter with n VMs on 127.0.0.1:port over TLS (certFile, keyFile),
// accepting only user/pass. Its files live under base (DIR/vcsim): base/run for vcsim's own and
// the stable datastore directory base/LocalDS_0.
func startVcsim(ctx context.Context, base string, port, n int, user, pass, certFile, keyFile string) (*vcsimLab, error) {
	run := filepath.Join(base, "run")
	stable := filepath.Join(base, vcDatastore)
	// vcsim keeps its inventory in memory only; its datastore is recreated on every start.
	_ = os.RemoveAll(run)
	_ = os.RemoveAll(stable)
	if err := os.MkdirAll(run, 0o755); err != nil {
		return nil, err
	}

	clusters := vmShape(n)
	model := simulator.VPX()
	model.Datacenter = 1
	model.Host = 1
	model.Cluster = clusters
	model.ClusterHost = 3
	model.Machine = 0 // VMs are created below, in parallel
	model.Datastore = 1
	model.Portgroup = 1

	if err := createModel(model, run); err != nil {
		return nil, fmt.Errorf("vcsim model: %w", err)
	}
	installGuestBehaviour(model) // guests.go: VMware Tools and guest shutdowns as vCenter has them

	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	model.Service.Listen = &url.URL{Host: fmt.Sprintf("127.0.0.1:%d", port), User: url.UserPassword(user, pass)}
	// vCenter's REST API too (/rest: sessions and tagging, tags.go), as a vCenter serves it.
	model.Service.RegisterEndpoints = true
	srv := model.Service.NewServer()

	// vcsim itself serves /folder without any authentication. A real vCenter demands a session, so
	// the lab puts a check in front: a vmware_soap_session cookie of a live SOAP session, or HTTP
	// Basic with the lab credentials; anything else gets 401. The server has not been handed to any
	// client yet, so swapping its handler here is safe.
	mux := model.Service.ServeMux
	srv.Config.Handler = ignoringGuests(model, folderAuth(mux, user, pass)) // guests.go

	lab := &vcsimLab{model: model, server: srv, url: fmt.Sprintf("https://127.0.0.1:%d/sdk", port), user: user, pass: pass}
	// QueryChangedDiskAreas, and snapshots that freeze their disks and carry change ids
	// (changed_areas.go, snapshots.go, cbt.go): what a warm migration needs of vCenter.
	srv.Config.Handler = changedAreasSOAP(srv.Config.Handler, model.Map(), func() string { return lab.dsDir },
		func(ck *http.Cookie) bool { return sessionAlive(mux, ck) })

	// Make the datastore directory stable: move vcsim's temporary one to DIR/vcsim/LocalDS_0 and
	// leave a symlink behind, so vcsim keeps working on the same files.
	c, err := lab.client(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Logout(context.Background())
	ds, err := findDatastore(ctx, c)
	if err != nil {
		return nil, err
	}
	tmpDS := ds.Summary.Url
	if err := os.Rename(tmpDS, stable); err != nil {
		return nil, fmt.Errorf("moving datastore dir: %w", err)
	}
	if err := os.Symlink(stable, tmpDS); err != nil {
		return nil, err
	}
	lab.dsDir = stable

	if err := createVMs(ctx, c, n, clusters); err != nil {
		return nil, err
	}
	return lab, nil
}

// tmpdirMu serialises createModel: TMPDIR is process-wide.
var tmpdirMu sync.Mutex

// createModel creates the model's inventory with its datastore directories under dir: vcsim
// makes them with os.MkdirTemp("", ...), so TMPDIR points into dir meanwhile. (Children take
// their environment from the lab's start, so they never see this TMPDIR.)
func createModel(model *simulator.Model, dir string) error {
	tmpdirMu.Lock()
	defer tmpdirMu.Unlock()
	oldTmp, hadTmp := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	defer func() {
		if hadTmp {
			os.Setenv("TMPDIR", oldTmp)
		} else {
			os.Unsetenv("TMPDIR")
		}
	}()
	return model.Create()
}

// client returns a logged-in client that talks to the simulator in memory (no TCP, no TLS):
// the lab's own set-up calls would otherwise spend most of their time in TLS handshakes.
func (v *vcsimLab) client(ctx context.Context) (*govmomi.Client, error) {
	u, _ := url.Parse(v.url)
	sc := soap.NewClient(u, true)
	sc.Client.Transport = handlerTransport{v.model.Service.ServeMux}
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return nil, err
	}
	c := &govmomi.Client{Client: vc, SessionManager: session.NewManager(vc)}
	if err := c.Login(ctx, url.UserPassword(v.user, v.pass)); err != nil {
		return nil, err
	}
	return c, nil
}

// handlerTransport is an http.RoundTripper that serves requests with an in-process handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	r.RequestURI = r.URL.RequestURI()
	t.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

func (v *vcsimLab) close() {
	if v.server != nil {
		v.server.Close()
	}
	if v.model != nil {
		v.model.Remove() // removes DIR/vcsim/run/govcsim-* (the symlink, not the stable dir)
	}
}

func findDatastore(ctx context.Context, c *govmomi.Client) (*mo.Datastore, error) {
	m := view.NewManager(c.Client)
	cv, err := m.CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"Datastore"}, true)
	if err != nil {
		return nil, err
	}
	defer cv.Destroy(ctx)
	var dss []mo.Datastore
	if err := cv.Retrieve(ctx, []string{"Datastore"}, []string{"name", "summary"}, &dss); err != nil {
		return nil, err
	}
	for i := range dss {
		if dss[i].Name == vcDatastore {
			return &dss[i], nil
		}
	}
	return nil, fmt.Errorf("datastore %s not found", vcDatastore)
}

type vmJob struct {
	name string
	pool *object.ResourcePool
	host *object.HostSystem
}

// createVMs creates n powered-on VMs shaped like vcsim's VPX model VMs: a pvscsi controller with
// one 10 GiB disk "[LocalDS_0] <name>/disk1.vmdk", an IDE cdrom and an e1000 NIC on DC0_DVPG0.
func createVMs(ctx context.Context, c *govmomi.Client, n, clusters int) error {
	if n <= 0 {
		return nil
	}
	finder := find.NewFinder(c.Client, false)
	dc, err := finder.Datacenter(ctx, vcDatacenter)
	if err != nil {
		return err
	}
	finder.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		return err
	}
	network, err := finder.Network(ctx, vcDatacenter+"_DVPG0")
	if err != nil {
		return err
	}
	backing, err := network.EthernetCardBackingInfo(ctx)
	if err != nil {
		return err
	}
	type pool struct {
		prefix string
		rp     *object.ResourcePool
		host   *object.HostSystem
	}
	var pools []pool
	host, err := finder.HostSystem(ctx, vcDatacenter+"_H0")
	if err != nil {
		return err
	}
	rp, err := host.ResourcePool(ctx)
	if err != nil {
		return err
	}
	pools = append(pools, pool{vcDatacenter + "_H0", rp, host})
	for j := 0; j < clusters; j++ {
		cl, err := finder.ClusterComputeResource(ctx, fmt.Sprintf("%s_C%d", vcDatacenter, j))
		if err != nil {
			return err
		}
		rp, err := cl.ResourcePool(ctx)
		if err != nil {
			return err
		}
		pools = append(pools, pool{fmt.Sprintf("%s_C%d_RP0", vcDatacenter, j), rp, nil})
	}
	var jobs []vmJob
	per, extra := n/len(pools), n%len(pools)
	for i, p := range pools {
		cnt := per
		if i < extra {
			cnt++
		}
		for k := 0; k < cnt; k++ {
			jobs = append(jobs, vmJob{name: fmt.Sprintf("%s_VM%d", p.prefix, k), pool: p.rp, host: p.host})
		}
	}

	create := func(j vmJob) error {
		config := types.VirtualMachineConfigSpec{
			Name:    j.name,
			GuestId: string(types.VirtualMachineGuestOsIdentifierOtherGuest),
			Files:   &types.VirtualMachineFileInfo{VmPathName: "[" + vcDatastore + "]"},
			// Changed block tracking on, as backup software leaves most production VMs: it is
			// what lets QueryChangedDiskAreas tell a disk's allocated areas.
			ChangeTrackingEnabled: types.NewBool(true),
		}
		var devices object.VirtualDeviceList
		scsi, err := devices.CreateSCSIController("pvscsi")
		if err != nil {
			return err
		}
		ide, err := devices.CreateIDEController()
		if err != nil {
			return err
		}
		cdrom, err := devices.CreateCdrom(ide.(*types.VirtualIDEController))
		if err != nil {
			return err
		}
		disk := devices.CreateDisk(scsi.(types.BaseVirtualController), types.ManagedObjectReference{},
			"["+vcDatastore+"] "+j.name+"/disk1.vmdk")
		disk.CapacityInKB = 10 << 20 // 10 GiB, as vcsim's model
		nic := esx.EthernetCard
		nic.Backing = backing
		devices = append(devices, scsi, cdrom, disk, &nic)
		config.DeviceChange, err = devices.ConfigSpec(types.VirtualDeviceConfigSpecOperationAdd)
		if err != nil {
			return err
		}
		task, err := folders.VmFolder.CreateVM(ctx, config, j.pool, j.host)
		if err != nil {
			return err
		}
		info, err := task.WaitForResult(ctx, nil)
		if err != nil {
			return fmt.Errorf("create VM %s: %w", j.name, err)
		}
		vm := object.NewVirtualMachine(c.Client, info.Result.(types.ManagedObjectReference))
		task, err = vm.PowerOn(ctx)
		if err != nil {
			return err
		}
		if _, err := task.WaitForResult(ctx, nil); err != nil {
			return fmt.Errorf("power on VM %s: %w", j.name, err)
		}
		return nil
	}

	// Small inventories are created in order, so morefs are the same on every start. vcsim
	// serialises VM creation on the VM folder's lock, so a few workers are all that helps.
	workers := 1
	if n > 64 {
		workers = 4
	}
	var done atomic.Int64
	jobCh := make(chan vmJob)
	errCh := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobCh {
				if err := create(j); err != nil {
					errCh <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	stopTick := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				progress("vcsim: %d of %d VMs created", done.Load(), n)
			}
		}
	}()
	var firstErr error
feed:
	for _, j := range jobs {
		select {
		case jobCh <- j:
		case firstErr = <-errCh:
			break feed
		case <-ctx.Done():
			firstErr = ctx.Err()
			break feed
		}
	}
	close(jobCh)
	wg.Wait()
	close(stopTick)
	if firstErr == nil {
		select {
		case firstErr = <-errCh:
		default:
		}
	}
	return firstErr
}

// vmLess orders vcsim names naturally: DC0_C0_RP0_VM2 < DC0_C0_RP0_VM10.
func vmLess(a, b string) bool {
	ka, kb := natKey(a), natKey(b)
	for i := 0; i < len(ka) && i < len(kb); i++ {
		if ka[i] != kb[i] {
			return ka[i] < kb[i]
		}
	}
	return len(ka) < len(kb)
}

func natKey(s string) []string {
	var out []string
	for _, p := range strings.Split(s, "_") {
		// left-pad numeric suffixes so string comparison is numeric
		i := len(p)
		for i > 0 && p[i-1] >= '0' && p[i-1] <= '9' {
			i--
		}
		out = append(out, p[:i]+fmt.Sprintf("%012s", p[i:]))
	}
	return out
}

func listVMs(ctx context.Context, c *govmomi.Client, props []string) ([]mo.VirtualMachine, error) {
	m := view.NewManager(c.Client)
	cv, err := m.CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return nil, err
	}
	defer cv.Destroy(ctx)
	var vms []mo.VirtualMachine
	if err := cv.Retrieve(ctx, []string{"VirtualMachine"}, props, &vms); err != nil {
		return nil, err
	}
	return vms, nil
}

type invDisk struct {
	Key           int32  `json:"key"`
	DatastorePath string `json:"datastorePath"`
	LocalPath     string `json:"localPath"`
	CapacityBytes int64  `json:"capacityBytes"`
}

type invNIC struct {
	MAC     string `json:"mac"`
	Network string `json:"network"`
}

type invVM struct {
	Name         string    `json:"name"`
	Moref        string    `json:"moref"`
	UUID         string    `json:"uuid"`
	InstanceUUID string    `json:"instanceUuid"`
	PowerState   string    `json:"powerState"`
	GuestID      string    `json:"guestId"`
	NumCPU       int32     `json:"numCpu"`
	MemoryMiB    int32     `json:"memoryMiB"`
	Firmware     string    `json:"firmware"`
	Host         string    `json:"host"`
	Disks        []invDisk `json:"disks"`
	NICs         []invNIC  `json:"nics"`
}

type inventory struct {
	VMs []invVM `json:"vms"`
}

// writeInventory reads every VM from the running simulator, makes sure each disk's backing file
// exists in the datastore directory (placeholder if vcsim did not create one) and writes
// inventory.json.
func (v *vcsimLab) writeInventory(ctx context.Context, path string) error {
	c, err := v.client(ctx)
	if err != nil {
		return err
	}
	defer c.Logout(context.Background())

	vms, err := listVMs(ctx, c, []string{"name", "config", "runtime.powerState", "runtime.host"})
	if err != nil {
		return err
	}
	// names of hosts, networks and portgroups (by moref value and by portgroup key)
	names := map[string]string{}
	m := view.NewManager(c.Client)
	for _, kind := range []string{"HostSystem", "Network", "DistributedVirtualPortgroup"} {
		cv, err := m.CreateContainerView(ctx, c.ServiceContent.RootFolder, []string{kind}, true)
		if err != nil {
			return err
		}
		if kind == "DistributedVirtualPortgroup" {
			var pgs []mo.DistributedVirtualPortgroup
			err = cv.Retrieve(ctx, []string{kind}, []string{"name", "key"}, &pgs)
			for _, e := range pgs {
				names[e.Self.Value] = e.Name
				names[e.Key] = e.Name
			}
		} else {
			var ents []mo.ManagedEntity
			err = cv.Retrieve(ctx, []string{kind}, []string{"name"}, &ents)
			for _, e := range ents {
				names[e.Self.Value] = e.Name
			}
		}
		_ = cv.Destroy(ctx)
		if err != nil {
			return fmt.Errorf("listing %s: %w", kind, err)
		}
	}

	sort.Slice(vms, func(i, j int) bool { return vmLess(vms[i].Name, vms[j].Name) })
	inv := inventory{VMs: make([]invVM, 0, len(vms))}
	prefix := "[" + vcDatastore + "] "
	for _, vm := range vms {
		if vm.Config == nil {
			continue
		}
		iv := invVM{
			Name:         vm.Name,
			Moref:        vm.Self.Value,
			UUID:         vm.Config.Uuid,
			InstanceUUID: vm.Config.InstanceUuid,
			PowerState:   string(vm.Runtime.PowerState),
			GuestID:      vm.Config.GuestId,
			NumCPU:       vm.Config.Hardware.NumCPU,
			MemoryMiB:    vm.Config.Hardware.MemoryMB,
			Firmware:     vm.Config.Firmware,
			Disks:        []invDisk{},
			NICs:         []invNIC{},
		}
		if iv.Firmware == "" {
			iv.Firmware = "bios"
		}
		if vm.Runtime.Host != nil {
			iv.Host = names[vm.Runtime.Host.Value]
		}
		for _, dev := range vm.Config.Hardware.Device {
			switch d := dev.(type) {
			case *types.VirtualDisk:
				fb, ok := d.Backing.(types.BaseVirtualDeviceFileBackingInfo)
				if !ok {
					continue
				}
				dsPath := fb.GetVirtualDeviceFileBackingInfo().FileName
				disk := invDisk{Key: d.Key, DatastorePath: dsPath, CapacityBytes: d.CapacityInBytes}
				if disk.CapacityBytes == 0 {
					disk.CapacityBytes = d.CapacityInKB * 1024
				}
				if strings.HasPrefix(dsPath, prefix) {
					disk.LocalPath = filepath.Join(v.dsDir, filepath.FromSlash(strings.TrimPrefix(dsPath, prefix)))
					if err := ensureDiskFile(disk.LocalPath, disk.CapacityBytes); err != nil {
						return err
					}
				}
				iv.Disks = append(iv.Disks, disk)
			case types.BaseVirtualEthernetCard:
				e := d.GetVirtualEthernetCard()
				nic := invNIC{MAC: e.MacAddress}
				switch b := e.Backing.(type) {
				case *types.VirtualEthernetCardNetworkBackingInfo:
					nic.Network = b.DeviceName
					if b.Network != nil && names[b.Network.Value] != "" {
						nic.Network = names[b.Network.Value]
					}
				case *types.VirtualEthernetCardDistributedVirtualPortBackingInfo:
					nic.Network = b.Port.PortgroupKey
					if n := names[b.Port.PortgroupKey]; n != "" {
						nic.Network = n
					}
				}
				iv.NICs = append(iv.NICs, nic)
			}
		}
		inv.VMs = append(inv.VMs, iv)
	}
	v.vmCount = len(inv.VMs)
	b, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o644)
}

// ensureDiskFile creates a placeholder VMDK when vcsim left none: a monolithicFlat descriptor
// naming a sparse "-flat" extent of the disk's capacity (no blocks on disk). Tests overwrite it
// with real VMDKs made by qemu-img.
func ensureDiskFile(p string, capacity int64) error {
	if exists(p) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	sectors := capacity / 512
	flat := strings.TrimSuffix(filepath.Base(p), ".vmdk") + "-flat.vmdk"
	cyl := sectors / (255 * 63)
	if cyl > 65535 {
		cyl = 65535
	}
	desc := fmt.Sprintf(`# Disk DescriptorFile
version=1
encoding="UTF-8"
CID=fffffffe
parentCID=ffffffff
createType="monolithicFlat"

# Extent description
RW %d FLAT "%s" 0

# The Disk Data Base
#DDB

ddb.adapterType = "lsilogic"
ddb.geometry.cylinders = "%d"
ddb.geometry.heads = "255"
ddb.geometry.sectors = "63"
ddb.virtualHWVersion = "13"
`, sectors, flat, cyl)
	if err := os.WriteFile(p, []byte(desc), 0o644); err != nil {
		return err
	}
	fp := filepath.Join(filepath.Dir(p), flat)
	if exists(fp) {
		return nil
	}
	f, err := os.Create(fp)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(capacity)
}

// sessionAlive tells whether cookie is the vmware_soap_session of a live SOAP session: it runs
// one authenticated call (CurrentTime) with it.
func sessionAlive(mux *http.ServeMux, cookie *http.Cookie) bool {
	body := `<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><CurrentTime xmlns="urn:vim25"><_this type="ServiceInstance">ServiceInstance</_this></CurrentTime></soapenv:Body></soapenv:Envelope>`
	req := httptest.NewRequest(http.MethodPost, "/sdk", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "text/xml; charset=utf-8")
	req.Header.Set("SOAPAction", "urn:vim25/8.0.3.0")
	req.AddCookie(cookie)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec.Code == http.StatusOK
}

// folderAuth guards /folder like a real vCenter does. Other paths go straight to vcsim.
func folderAuth(mux *http.ServeMux, user, pass string) http.Handler {
	soapCheck := func(cookie *http.Cookie) bool { return sessionAlive(mux, cookie) }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/folder") {
			ok := false
			if u, p, has := r.BasicAuth(); has {
				ok = subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1 &&
					subtle.ConstantTimeCompare([]byte(p), []byte(pass)) == 1
			} else if ck, err := r.Cookie("vmware_soap_session"); err == nil && ck.Value != "" {
				ok = soapCheck(ck)
			}
			if !ok {
				w.Header().Set("WWW-Authenticate", `Basic realm="VMware HTTP server"`)
				http.Error(w, "401 Unauthorized: a vmware_soap_session cookie or HTTP Basic credentials are required", http.StatusUnauthorized)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// vcsimAnswers does one unauthenticated SOAP round trip (RetrieveServiceContent).
func vcsimAnswers(ctx context.Context, rawURL string) error {
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // probe of our own server
	return soapAnswers(ctx, cl, rawURL)
}

// soapAnswers asks the SOAP endpoint at rawURL for its ServiceContent through cl.
func soapAnswers(ctx context.Context, cl *http.Client, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body := `<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><RetrieveServiceContent xmlns="urn:vim25"><_this type="ServiceInstance">ServiceInstance</_this></RetrieveServiceContent></soapenv:Body></soapenv:Envelope>`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/xml; charset=utf-8")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("vcsim SOAP answered %s", resp.Status)
	}
	return nil
}
