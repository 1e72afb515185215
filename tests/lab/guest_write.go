package main

// `ferry-lab guest-write`: a guest that writes its disk while its VM runs, the load a warm
// migration copies under. It writes random bytes into whole 1 MiB blocks of the VM's first
// disk, straight into the live flat extent on the lab's datastore (where a running guest's
// writes land; snapshots.go freezes copies of it), and only while vCenter reports the VM
// powered on. The blocks are drawn by a seeded generator from [1 MiB, capacity-1 MiB), sparing
// the partition table at the start and the backup GPT at the end of the disk.
//
// One line per pass on stdout:
//
//	pass=1 blocks=3 bytes=3145728 disk="[LocalDS_0] DC0_H0_VM0/disk1.vmdk" written=5,9,12
//
// written lists the blocks by number (block n is bytes [n MiB, n+1 MiB)).

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

type guestWriteSpec struct {
	vm      string
	percent float64
	seed    uint64
	every   time.Duration
}

func runGuestWrite(args []string) int {
	fs := flag.NewFlagSet("ferry-lab guest-write", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "the running lab's state directory (holds lab.json)")
	var s guestWriteSpec
	fs.StringVar(&s.vm, "vm", "", "the VM's inventory name")
	fs.Float64Var(&s.percent, "percent", 0, "share of the first disk's 1 MiB blocks in [1 MiB, capacity-1 MiB) to write per pass, in percent (0 < P <= 100)")
	fs.Uint64Var(&s.seed, "seed", 1, "seed of the blocks chosen and the bytes written")
	fs.DurationVar(&s.every, "every", 0, "write a pass every DURATION until killed or the VM powers off (default: one pass)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || s.vm == "" || !(s.percent > 0 && s.percent <= 100) || s.every < 0 {
		fmt.Fprintln(os.Stderr, "ferry-lab guest-write: --state-dir, --vm and --percent (0 < P <= 100) are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := guestWrite(ctx, *stateDir, s, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "ferry-lab guest-write: %v\n", err)
		return 1
	}
	return 0
}

// guestWrite writes passes until it is done: after one pass without s.every, else when ctx ends
// or the VM is no longer powered on. A VM that is not on at the first pass is an error.
func guestWrite(ctx context.Context, stateDir string, s guestWriteSpec, out io.Writer) error {
	c, vc, vm, err := connectLab(ctx, stateDir, s.vm)
	if err != nil {
		return err
	}
	defer c.Logout(context.Background())
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], s.seed)
	src := rand.NewChaCha8(seed)
	for pass := 1; ; pass++ {
		var o mo.VirtualMachine
		if err := vm.Properties(ctx, vm.Reference(), []string{"runtime.powerState", "config.hardware.device"}, &o); err != nil {
			if ctx.Err() != nil && pass > 1 {
				return nil
			}
			return err
		}
		if o.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			if pass == 1 {
				return fmt.Errorf("%s is %s: a guest writes its disk only while its VM runs", s.vm, o.Runtime.PowerState)
			}
			fmt.Fprintf(out, "%s is %s: stopping\n", s.vm, o.Runtime.PowerState)
			return nil
		}
		disks := disksOf(o.Config.Hardware.Device)
		if len(disks) == 0 {
			return fmt.Errorf("%s has no disk", s.vm)
		}
		disk := disks[0]
		i := strings.Index(disk.fileName, "] ")
		if i < 0 || vc.DatastoreDir == "" {
			return fmt.Errorf("%s: not a file of the lab's datastore (lab.json vcenter.datastoreDir %q)", disk.fileName, vc.DatastoreDir)
		}
		local := filepath.Join(vc.DatastoreDir, filepath.FromSlash(disk.fileName[i+2:]))
		blocks, err := writeBlocks(local, disk.capacity, s.percent, src)
		if err != nil {
			return fmt.Errorf("%s: %w", disk.fileName, err)
		}
		list := make([]string, len(blocks))
		for i, b := range blocks {
			list[i] = strconv.FormatInt(b, 10)
		}
		fmt.Fprintf(out, "pass=%d blocks=%d bytes=%d disk=%q written=%s\n",
			pass, len(blocks), int64(len(blocks))*vmfsBlock, disk.fileName, strings.Join(list, ","))
		if s.every == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.every):
		}
	}
}

// writeBlocks writes random bytes into percent % of the disk's blocks in [1 MiB, capacity-1 MiB)
// (capacity: the smaller of the VM's and the descriptor's), drawn from src; it returns them in
// order.
func writeBlocks(descriptor string, capacity int64, percent float64, src *rand.ChaCha8) ([]int64, error) {
	flat, offset, size, ok := flatExtent(descriptor)
	if !ok {
		return nil, fmt.Errorf("not a descriptor of one flat extent: the guest writer writes flat disks only")
	}
	capacity = min(capacity, size)
	first, end := int64(1), capacity/vmfsBlock-1 // blocks first..end-1
	if end <= first {
		return nil, fmt.Errorf("a disk of %d bytes has no block between its first and last MiB", capacity)
	}
	n := end - first
	k := int64(math.Round(percent / 100 * float64(n)))
	k = max(1, min(k, n))
	blocks := make([]int64, 0, k)
	for _, i := range rand.New(src).Perm(int(n))[:k] {
		blocks = append(blocks, first+int64(i))
	}
	slices.Sort(blocks)
	f, err := os.OpenFile(filepath.Join(filepath.Dir(descriptor), flat), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, vmfsBlock)
	for _, b := range blocks {
		_, _ = src.Read(buf)
		if _, err := f.WriteAt(buf, offset+b*vmfsBlock); err != nil {
			f.Close()
			return nil, err
		}
	}
	return blocks, f.Close()
}
