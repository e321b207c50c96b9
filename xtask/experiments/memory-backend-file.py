#!/usr/bin/env python3
"""A one-off experiment, not part of the rig: does a file-backed guest memory
(memory-backend-file + x-ignore-shared) restore faster than the rig's streamed state?

    python3 xtask/experiments/memory-backend-file.py <image cache entry> <scratch dir> [runs]

It makes two snapshots of one image with the rig's QEMU line (minus the sandbox): one streamed
as the rig saves them, one whose RAM lives in a file with x-ignore-shared, so the saved state
holds only devices.  Then it resumes them in turn, three ways: streamed; the RAM file mapped
private (share=off, so the run's writes never reach it); a copy of the RAM file mapped shared.
Per resume it prints prep (overlay, hashing, copying), load (to QMP 'running'), answer (to the
first ssh command) and the QEMU process's PSS.  HASH_RAM=1 also hashes the RAM file, as a
resume that checks its snapshot must.  Results are in docs/measurements.md."""
import hashlib, json, os, shutil, socket, subprocess, sys, threading, time

IMG = sys.argv[1]          # image cache entry
WORK = sys.argv[2]         # scratch dir
RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
MEM = 1024
os.makedirs(WORK, exist_ok=True)
KEY = os.path.join(WORK, "id")
if not os.path.exists(KEY):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", KEY], check=True)
pub = open(KEY + ".pub").read().split()
APPEND = ("console=ttyS0 earlyprintk=serial,ttyS0 root=/dev/vda rootfstype=ext4 rw "
          "init=/usr/sbin/sharedos-init panic=-1 sharedos.authorized_key=%s,%s" % (pub[0], pub[1]))


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def argv(d, disk, port, mem, incoming):
    a = ["qemu-system-x86_64", "-machine", "pc" + (",memory-backend=pc.ram" if mem else ""),
         "-accel", "tcg", "-cpu", "max,cx16=off", "-m", str(MEM), "-smp", "2",
         "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
         "-chardev", "file,id=console,path=%s/serial.log,append=on" % d, "-serial", "chardev:console",
         "-kernel", IMG + "/vmlinuz", "-initrd", IMG + "/initrd.img", "-append", APPEND,
         "-drive", "file=%s,if=virtio,format=qcow2,cache=unsafe" % disk,
         "-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:22" % port,
         "-device", "virtio-net-pci,netdev=n0", "-device", "vmgenid,guid=auto",
         "-qmp", "unix:%s/qmp.sock,server=on,wait=off" % d]
    if mem:
        path, share = mem
        a += ["-object", "memory-backend-file,id=pc.ram,size=%dM,mem-path=%s,share=%s"
              % (MEM, path, "on" if share else "off")]
    if incoming:
        a += ["-incoming", incoming]
    return a


class Qmp:
    def __init__(self, path):
        t = time.time()
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX); self.s.connect(path); break
            except OSError:
                if time.time() - t > 30: raise
                time.sleep(0.01)
        self.f = self.s.makefile("rw")
        json.loads(self.f.readline())
        self.cmd("qmp_capabilities")

    def cmd(self, c, **args):
        m = {"execute": c}
        if args: m["arguments"] = args
        self.f.write(json.dumps(m) + "\n"); self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if "return" in r: return r["return"]
            if "error" in r: raise RuntimeError("%s: %s" % (c, r["error"]))


def ssh_true(port, timeout=60):
    t = time.time()
    while time.time() - t < timeout:
        r = subprocess.run(["ssh", "-q", "-i", KEY, "-p", str(port), "-o", "StrictHostKeyChecking=no",
                            "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
                            "-o", "BatchMode=yes", "root@127.0.0.1", "cat /proc/sys/kernel/random/uuid"],
                           capture_output=True, text=True)
        if r.returncode == 0: return r.stdout.strip()
        time.sleep(0.05)
    raise RuntimeError("no ssh")


def make(name, mem_share):
    d = os.path.join(WORK, name); shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
    disk = d + "/disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", IMG + "/disk.img", disk], check=True)
    mem = (d + "/ram", True) if mem_share else None
    p = subprocess.Popen(argv(d, disk, free_port(), mem, None), stderr=open(d + "/qemu.log", "w"))
    while not os.path.exists(d + "/serial.log") or b"SHAREDOS-READY" not in open(d + "/serial.log", "rb").read():
        if p.poll() is not None: raise RuntimeError("qemu died")
        time.sleep(0.2)
    q = Qmp(d + "/qmp.sock")
    if mem:
        q.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
    ls = socket.socket(socket.AF_UNIX); ls.bind(d + "/mig.sock"); ls.listen(1)
    out = open(d + "/state", "wb")
    def recv():
        c, _ = ls.accept()
        while True:
            b = c.recv(1 << 20)
            if not b: break
            out.write(b)
        out.close()
    th = threading.Thread(target=recv); th.start()
    q.cmd("migrate", uri="unix:" + d + "/mig.sock")
    while q.cmd("query-migrate").get("status") not in ("completed", "failed"):
        time.sleep(0.05)
    print(name, "migrate", q.cmd("query-migrate")["status"])
    q.cmd("quit"); p.wait(); th.join()
    print(name, "state bytes", os.path.getsize(d + "/state"),
          "ram file allocated MiB", (os.stat(d + "/ram").st_blocks * 512 >> 20) if mem else 0)
    return d


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b: break
            h.update(b)
    return h.hexdigest()


def resume(snap, mode, i):
    d = os.path.join(WORK, "run-%s-%d" % (mode, i)); shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
    t0 = time.time()
    shutil.copy(snap + "/serial.log", d + "/serial.log")
    disk = d + "/disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", snap + "/disk.qcow2", disk], check=True)
    hashed = [snap + "/state"]
    if mode == "stream":
        mem = None
    elif mode == "file-private":
        mem = (snap + "/ram", False)
    elif mode == "file-copy":
        shutil.copyfile(snap + "/ram", d + "/ram")
        mem = (d + "/ram", True)
    if mode != "stream" and HASH_RAM:
        hashed.append(snap + "/ram")
    for h in hashed:
        sha(h)
    t_prep = time.time() - t0
    port = free_port()
    incoming = "unix:" + d + "/in.sock" if mode == "stream" else "defer"
    p = subprocess.Popen(argv(d, disk, port, mem, incoming), stderr=open(d + "/qemu.log", "w"))
    if mode != "stream":
        q = Qmp(d + "/qmp.sock")
        q.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
        q.cmd("migrate-incoming", uri="unix:" + d + "/in.sock")
    t = time.time()
    while True:
        try:
            c = socket.socket(socket.AF_UNIX); c.connect(d + "/in.sock"); break
        except OSError:
            if time.time() - t > 30: raise
            time.sleep(0.01)
    with open(snap + "/state", "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b: break
            c.sendall(b)
    c.close()
    if mode == "stream":
        q = Qmp(d + "/qmp.sock")
    while q.cmd("query-status")["status"] != "running":
        if p.poll() is not None: raise RuntimeError("qemu died: " + open(d + "/qemu.log").read())
        time.sleep(0.01)
    t_load = time.time() - t0
    out = ssh_true(port)
    t_answer = time.time() - t0
    rss = 0
    for line in open("/proc/%d/smaps_rollup" % p.pid):
        if line.startswith("Pss:"): rss = int(line.split()[1]) >> 10
    q.cmd("quit"); p.wait()
    shutil.rmtree(d, ignore_errors=True)
    return t_prep, t_load, t_answer, rss, out


HASH_RAM = os.environ.get("HASH_RAM") == "1"
if __name__ == "__main__":
    s_stream = make("snap-stream", False)
    s_file = make("snap-file", True)
    rows = {m: [] for m in ("stream", "file-private", "file-copy")}
    for i in range(RUNS):
        for m in rows:
            snap = s_stream if m == "stream" else s_file
            r = resume(snap, m, i)
            rows[m].append(r)
            print(m, i, "prep %.2f load %.2f answer %.2f pss %d MiB uuid %s" % r, flush=True)
    for m, rs in rows.items():
        med = lambda k: sorted(x[k] for x in rs)[len(rs) // 2]
        print("MEDIAN %-13s prep %.2f load %.2f answer %.2f pss %d MiB" % (m, med(0), med(1), med(2), med(3)))
