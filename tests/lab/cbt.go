package main

// Changed block tracking as vSphere keeps it, played from the datastore's own files.
//
// vSphere tracks the blocks a guest writes in a <disk>-ctk.vmdk beside the disk and names each
// point in that history with a change id, which it reports in the disk backing's changeId of the
// snapshot a backup takes (vSphere API reference, VirtualDiskFlatVer2BackingInfo.changeId; VDDK
// programming guide, "Changed Block Tracking on Virtual Disks"). The lab cannot see the guest's
// writes (tests and `ferry-lab guest-write` write the flat extent directly), so it keeps, for every
// change id, the disk's contents at that point as one SHA-256 per 1 MiB block (holes marked), and
// answers QueryChangedDiskAreas by comparing them with the disk now. Rules followed:
//
//   - the id's form is vSphere's: the 16 bytes of the tracking file's uuid, then "/" and a
//     sequence number ("52 3d 1b 9e 8e 2c 49 2d-0b 0d 0e 74 7f 67 4b 9d/5"), which VDDK's guide
//     tells callers to treat as opaque;
//   - an id stays valid after the snapshot it came with is removed, until change tracking is
//     turned off: then vSphere deletes the ctk file, and every old id is refused (with a
//     FileFault, see changed_areas.go) even once tracking is on again under a new uuid (VMware
//     KB "Resetting Changed Block Tracking for VMware vSphere virtual machines");
//   - a block counts as changed when its contents differ, or it was data and is a hole now (or
//     the reverse): what a write or an UNMAP would have marked. A block rewritten with the same
//     bytes is not reported, which vSphere would report: the lab can only be stricter about
//     what it leaves out, never miss a change.
//
// The records live beside the disk, in DIR/<disk>-ctk.lab/ (a "uuid" file and one
// <sequence>.digests per id), so they need nothing in memory and outlive the lab process;
// a new lab start recreates the datastore, and with it the disks they describe.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/vmware/govmomi/vim25/types"
)

// digests is a disk's contents at one moment: per 1 MiB block, its SHA-256 (blocks with no data,
// holes, are left out). opaque: the disk is not one flat extent, the lab cannot tell its blocks.
type digests struct {
	capacity int64
	opaque   bool
	blocks   map[int64][sha256.Size]byte
}

var errUnknownChangeID = errors.New("unknown change id")

var changeIDForm = regexp.MustCompile(`^([0-9a-f]{2}(?: [0-9a-f]{2}){7})-([0-9a-f]{2}(?: [0-9a-f]{2}){7})/([0-9]+)$`)

// formatChangeID writes a change id as vSphere does: the uuid's bytes in hex, space-separated, a
// '-' after the eighth, then "/" and the sequence.
func formatChangeID(uuid [16]byte, seq int) string {
	var b strings.Builder
	for i, x := range uuid {
		switch {
		case i == 8:
			b.WriteByte('-')
		case i > 0:
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%02x", x)
	}
	fmt.Fprintf(&b, "/%d", seq)
	return b.String()
}

// parseChangeID is formatChangeID's inverse; ok is false for anything else.
func parseChangeID(id string) (uuid [16]byte, seq int, ok bool) {
	m := changeIDForm.FindStringSubmatch(id)
	if m == nil {
		return uuid, 0, false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(m[1]+m[2], " ", ""))
	if err != nil || len(raw) != 16 {
		return uuid, 0, false
	}
	seq, err = strconv.Atoi(m[3])
	if err != nil {
		return uuid, 0, false
	}
	copy(uuid[:], raw)
	return uuid, seq, true
}

// ctkDir is where a disk's change-tracking records live: beside its descriptor (local path).
func ctkDir(descriptor string) string {
	return strings.TrimSuffix(descriptor, ".vmdk") + "-ctk.lab"
}

// trackingUUID is the disk's current tracking uuid; create makes one when tracking has none.
func trackingUUID(descriptor string, create bool) ([16]byte, error) {
	var uuid [16]byte
	p := filepath.Join(ctkDir(descriptor), "uuid")
	raw, err := os.ReadFile(p)
	if err == nil {
		b, err := hex.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil || len(b) != 16 {
			return uuid, fmt.Errorf("%s: not a uuid", p)
		}
		copy(uuid[:], b)
		return uuid, nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return uuid, err
	}
	if err := os.MkdirAll(ctkDir(descriptor), 0o755); err != nil {
		return uuid, err
	}
	_, _ = rand.Read(uuid[:])
	uuid[0] = 0x52 // vSphere's ids start with 52: its uuids are of that form
	return uuid, writeFileAtomic(p, []byte(hex.EncodeToString(uuid[:])+"\n"), 0o644)
}

// newChangeID records d as the disk's next point in its history and returns its id.
func newChangeID(descriptor string, d *digests) (string, error) {
	uuid, err := trackingUUID(descriptor, true)
	if err != nil {
		return "", err
	}
	seq := 0
	entries, err := os.ReadDir(ctkDir(descriptor))
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".digests")); err == nil && n > seq {
			seq = n
		}
	}
	seq++
	if err := writeDigests(filepath.Join(ctkDir(descriptor), fmt.Sprintf("%d.digests", seq)), d); err != nil {
		return "", err
	}
	return formatChangeID(uuid, seq), nil
}

// recordOf reads the disk's contents at change id id: errUnknownChangeID when the id is not one of
// this disk's current tracking (another disk's, one from before a reset, one never given).
func recordOf(descriptor, id string) (*digests, error) {
	uuid, seq, ok := parseChangeID(id)
	if !ok {
		return nil, errUnknownChangeID
	}
	current, err := trackingUUID(descriptor, false)
	if err != nil || current != uuid {
		return nil, errUnknownChangeID
	}
	d, err := readDigests(filepath.Join(ctkDir(descriptor), fmt.Sprintf("%d.digests", seq)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errUnknownChangeID
	}
	return d, err
}

// resetTracking forgets a disk's history, as turning change tracking off deletes the ctk file.
func resetTracking(descriptor string) error {
	return os.RemoveAll(ctkDir(descriptor))
}

// The record file: magic, capacity, opaque flag, count, then (block, SHA-256) pairs in block order.
var digestsMagic = []byte("FLABCBT1")

func writeDigests(path string, d *digests) error {
	var buf bytes.Buffer
	buf.Write(digestsMagic)
	opaque := byte(0)
	if d.opaque {
		opaque = 1
	}
	_ = binary.Write(&buf, binary.LittleEndian, d.capacity)
	buf.WriteByte(opaque)
	keys := sortedBlocks(d.blocks)
	_ = binary.Write(&buf, binary.LittleEndian, int64(len(keys)))
	for _, k := range keys {
		_ = binary.Write(&buf, binary.LittleEndian, k)
		sum := d.blocks[k]
		buf.Write(sum[:])
	}
	return writeFileAtomic(path, buf.Bytes(), 0o644)
}

func readDigests(path string) (*digests, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := bytes.NewReader(raw)
	magic := make([]byte, len(digestsMagic))
	if _, err := io.ReadFull(r, magic); err != nil || !bytes.Equal(magic, digestsMagic) {
		return nil, fmt.Errorf("%s: not a change-tracking record", path)
	}
	d := &digests{blocks: map[int64][sha256.Size]byte{}}
	var opaque byte
	var n int64
	if err := binary.Read(r, binary.LittleEndian, &d.capacity); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if opaque, err = r.ReadByte(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d.opaque = opaque == 1
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := int64(0); i < n; i++ {
		var k int64
		var sum [sha256.Size]byte
		if err := binary.Read(r, binary.LittleEndian, &k); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, err := io.ReadFull(r, sum[:]); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		d.blocks[k] = sum
	}
	return d, nil
}

func sortedBlocks(m map[int64][sha256.Size]byte) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// diskDigests reads the disk whose descriptor is at descriptor (local path) as it is now.
func diskDigests(descriptor string, capacity int64) (*digests, error) {
	d := &digests{capacity: capacity, blocks: map[int64][sha256.Size]byte{}}
	flat, offset, ok := singleFlatExtent(descriptor)
	if !ok {
		if _, err := os.Stat(descriptor); err != nil {
			return nil, err
		}
		d.opaque = true
		return d, nil
	}
	f, err := os.Open(filepath.Join(filepath.Dir(descriptor), flat))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blocks, err := dataBlocks(f, offset, capacity)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, vmfsBlock)
	for _, b := range blocks {
		n := min(int64(vmfsBlock), capacity-b*vmfsBlock)
		clear(buf)
		// Past the file's end the disk reads zeros, as a hole does.
		if _, err := f.ReadAt(buf[:n], offset+b*vmfsBlock); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		d.blocks[b] = sha256.Sum256(buf[:n])
	}
	return d, nil
}

// dataBlocks lists the 1 MiB blocks of the disk (extent at offset in f) that hold any data.
func dataBlocks(f *os.File, offset, capacity int64) ([]int64, error) {
	fd := int(f.Fd())
	var out []int64
	pos, end := offset, offset+capacity
	for pos < end {
		data, err := syscall.Seek(fd, pos, seekData)
		if errors.Is(err, syscall.ENXIO) || (err == nil && data >= end) {
			break // no data past pos
		}
		if err != nil {
			return nil, err
		}
		hole, err := syscall.Seek(fd, data, seekHole)
		if err != nil || hole > end {
			hole = end
		}
		for b := (data - offset) / vmfsBlock; b*vmfsBlock < hole-offset; b++ {
			if n := len(out); n == 0 || out[n-1] < b {
				out = append(out, b)
			}
		}
		pos = hole
	}
	return out, nil
}

// changedBlocks is the areas (whole blocks, adjacent ones merged) where now differs from then.
func changedBlocks(then, now *digests, capacity int64) []types.DiskChangeExtent {
	if then.opaque || now.opaque {
		// "On other storage types ... a single extent covering the entire disk" (VDDK guide).
		return []types.DiskChangeExtent{{Start: 0, Length: capacity}}
	}
	var changed []int64
	for b, sum := range then.blocks {
		if other, ok := now.blocks[b]; !ok || other != sum {
			changed = append(changed, b)
		}
	}
	for b := range now.blocks {
		if _, ok := then.blocks[b]; !ok {
			changed = append(changed, b)
		}
	}
	slices.Sort(changed)
	return blockAreas(changed, capacity)
}

// blockAreas turns sorted block numbers into areas, adjacent blocks merged, clipped to capacity.
func blockAreas(blocks []int64, capacity int64) []types.DiskChangeExtent {
	var out []types.DiskChangeExtent
	for _, b := range blocks {
		start := b * vmfsBlock
		if start >= capacity {
			break
		}
		stop := min(start+vmfsBlock, capacity)
		if n := len(out); n > 0 && out[n-1].Start+out[n-1].Length == start {
			out[n-1].Length = stop - out[n-1].Start
		} else {
			out = append(out, types.DiskChangeExtent{Start: start, Length: stop - start})
		}
	}
	return out
}

// ficlone is FICLONE from linux/fs.h: share the source's blocks (btrfs, XFS); ext4 refuses it.
const ficlone = 0x40049409

// sparseCopy copies src to a new file dst keeping its holes: a reflink when the filesystem has
// them, otherwise only the data ranges (SEEK_DATA/SEEK_HOLE), the file's size kept.
func sparseCopy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = func() error {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, out.Fd(), ficlone, in.Fd()); errno == 0 {
			return nil
		}
		fd := int(in.Fd())
		buf := make([]byte, 4*vmfsBlock)
		for pos := int64(0); pos < st.Size(); {
			data, err := syscall.Seek(fd, pos, seekData)
			if errors.Is(err, syscall.ENXIO) {
				break
			}
			if err != nil {
				return err
			}
			hole, err := syscall.Seek(fd, data, seekHole)
			if err != nil {
				return err
			}
			if _, err := io.CopyBuffer(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data), buf); err != nil {
				return err
			}
			pos = hole
		}
		return out.Truncate(st.Size())
	}()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst)
	}
	return err
}
