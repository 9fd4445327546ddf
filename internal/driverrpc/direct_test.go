package driverrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/abi/storepb"
	"github.com/agenthost/agenthost/internal/driverrpc"
	"github.com/agenthost/agenthost/plugins/memstore/memdriver"
	"github.com/agenthost/agenthost/sdk/storedriver"
	"github.com/agenthost/agenthost/sdk/storedriver/storedrivertest"
)

// descPlugin serves s with the Store service less the methods in drop: a
// driver built with an SDK from before them.
type descPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	s    *driverrpc.Server
	drop []string
}

func (p *descPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	desc := storepb.Store_ServiceDesc
	desc.Methods = slices.DeleteFunc(slices.Clone(desc.Methods), func(m grpc.MethodDesc) bool { return slices.Contains(p.drop, m.MethodName) })
	s.RegisterService(&desc, p.s)
	return nil
}

func (p *descPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return driverrpc.NewClient(c), nil
}

// connectServer returns a client over an in-process gRPC connection to srv,
// its service less the methods in drop.
func connectServer(t *testing.T, srv *driverrpc.Server, drop ...string) *driverrpc.Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, plugin.PluginSet{driverrpc.PluginName: &descPlugin{s: srv, drop: drop}})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(driverrpc.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*driverrpc.Client)
}

// connectDirect returns a client of a server of f switched to the server's
// direct transport, and the transport's listener.
func connectDirect(t *testing.T, f storedriver.Factory) (*driverrpc.Client, *driverrpc.DirectListener) {
	t.Helper()
	srv := driverrpc.NewServer(f)
	l, err := srv.ListenDirect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	c := connectServer(t, srv)
	if err := c.UseDirect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Disconnect)
	if c.Transport() != "direct" {
		t.Fatalf("transport %q after UseDirect, want direct", c.Transport())
	}
	return c, l
}

func TestContractOverDirect(t *testing.T) {
	var ls []*driverrpc.DirectListener
	storedrivertest.Run(t, func(t *testing.T) driver.Driver {
		c, l := connectDirect(t, memFactory)
		ls = append(ls, l)
		if err := c.Open(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		return c.ForProtocol(driver.ProtocolVersion)
	})
	var served int64
	for _, l := range ls {
		served += driverrpc.DirectServed(l)
	}
	if served == 0 {
		t.Fatal("no call went over the direct transport")
	}
}

func TestDirectOpenAndErrors(t *testing.T) {
	ctx := context.Background()
	c, l := connectDirect(t, memFactory)
	_, err := c.LoadThread(ctx, "t")
	if !errors.Is(err, driver.ErrClosed) || !strings.Contains(err.Error(), "not opened") {
		t.Fatalf("call before Open: %v, want ErrClosed saying it was not opened", err)
	}
	err = c.Open(ctx, map[string]string{"dir": "x"})
	if !errors.Is(err, driver.ErrInvalidArgument) || !strings.Contains(err.Error(), "no configuration") {
		t.Fatalf("Open with a bad config: %v, want ErrInvalidArgument with the driver's reason", err)
	}
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := storedrivertest.NewBuilder("t")
	r := b.Run("r")
	if _, err := c.Commit(ctx, b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{b.Msg("m", r.ID)}, nil)); err != nil {
		t.Fatal(err)
	}
	// The same batch again: its expected version is stale.
	if _, err := c.Commit(ctx, b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{b.Msg("m2", r.ID)}, nil)); !errors.Is(err, driver.ErrVersionConflict) {
		t.Fatalf("stale commit: %v, want ErrVersionConflict", err)
	}
	if _, err := c.ReadHistory(ctx, "t", 0, -1); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("negative limit: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.ReadHistory(ctx, "t", 0, 1<<40); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("limit too large: %v, want ErrInvalidArgument", err)
	}
	// Too large for the wire: refused before it is sent.
	big := b.Msg("big", r.ID)
	big.Content = strings.Repeat("x", driverrpc.MaxMessageSize)
	if _, err := c.Commit(ctx, b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{big}, nil)); !errors.Is(err, driver.ErrTooLarge) {
		t.Fatalf("a batch over the message limit: %v, want ErrTooLarge", err)
	}
	if driverrpc.DirectServed(l) < 5 {
		t.Fatalf("%d calls went over the direct transport, want every one", driverrpc.DirectServed(l))
	}
}

// TestDirectFallback: a driver that does not offer the direct transport
// (no listener, or an SDK from before the Direct RPC) keeps gRPC.
func TestDirectFallback(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old=%v", old), func(t *testing.T) {
			ctx := context.Background()
			srv := driverrpc.NewServer(memFactory)
			var c *driverrpc.Client
			if old {
				// It listens, but its service has no Direct: the host
				// never learns of the socket.
				l, err := srv.ListenDirect()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				c = connectServer(t, srv, "Direct")
			} else {
				c = connectServer(t, srv)
			}
			err := c.UseDirect(ctx)
			if !errors.Is(err, driverrpc.ErrNoDirect) {
				t.Fatalf("UseDirect: %v, want ErrNoDirect", err)
			}
			if c.Transport() != "grpc" {
				t.Fatalf("transport %q, want grpc", c.Transport())
			}
			if err := c.Open(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := c.LoadThread(ctx, "t"); err != nil {
				t.Fatalf("LoadThread: %v", err)
			}
		})
	}
}

// TestDirectSecret: a connection that does not present the secret is
// closed without an answer.
func TestDirectSecret(t *testing.T) {
	srv := driverrpc.NewServer(memFactory)
	l, err := srv.ListenDirect()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(strings.TrimSuffix(l.Path(), "/store.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("the socket's directory has mode %v, want 0700", fi.Mode().Perm())
	}
	r, err := srv.Direct(context.Background(), &storepb.DirectRequest{Versions: []int32{1}})
	if err != nil {
		t.Fatal(err)
	}
	hello := func(version byte, secret []byte) error {
		c, err := net.Dial("unix", r.Address)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.Write(append([]byte{version}, secret...)); err != nil {
			return err
		}
		var ack [1]byte
		_, err = io.ReadFull(c, ack[:])
		return err
	}
	if err := hello(1, r.Secret); err != nil {
		t.Fatalf("the right secret: %v", err)
	}
	wrong := slices.Clone(r.Secret)
	wrong[0] ^= 1
	if err := hello(1, wrong); !errors.Is(err, io.EOF) {
		t.Fatalf("a wrong secret: %v, want the connection closed", err)
	}
	if err := hello(2, r.Secret); !errors.Is(err, io.EOF) {
		t.Fatalf("an unknown framing version: %v, want the connection closed", err)
	}
	if _, err := srv.Direct(context.Background(), &storepb.DirectRequest{Versions: []int32{7}}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Direct for framing version 7 only: %v, want UNIMPLEMENTED", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket after Close: %v, want it removed", err)
	}
	if _, err := srv.Direct(context.Background(), &storepb.DirectRequest{Versions: []int32{1}}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Direct after the listener closed: %v, want UNIMPLEMENTED", err)
	}
}

// TestDirectConcurrent: many callers at once, commits grouped or not,
// each with its own result; the pool grows to serve them and no further.
func TestDirectConcurrent(t *testing.T) {
	ctx := context.Background()
	c, l := connectDirect(t, memFactory)
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const callers, commits = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			b := storedrivertest.NewBuilder(fmt.Sprintf("t%d", i))
			for k := range commits {
				r := b.Run(fmt.Sprintf("t%d-r%d", i, k))
				batch := b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{b.Msg(r.ID+"-in", r.ID)}, nil)
				if _, err := c.Commit(ctx, batch); err != nil {
					errs <- err
					return
				}
				b.Committed(batch)
				snap, err := c.LoadThread(ctx, b.ID)
				if err != nil {
					errs <- err
					return
				}
				if snap.Thread.Version != b.Version {
					errs <- fmt.Errorf("thread %s at version %d, want %d", b.ID, snap.Thread.Version, b.Version)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	open, idle := driverrpc.DirectOpen(c)
	if open < 1 || open > callers+1 || idle != open {
		t.Fatalf("%d connections open, %d idle, after %d callers: want 1 to %d, all idle", open, idle, callers, callers+1)
	}
	if driverrpc.DirectServed(l) < callers*commits {
		t.Fatalf("%d calls over the direct transport, want at least %d", driverrpc.DirectServed(l), callers*commits)
	}
}

// blockingDriver is a memstore whose LoadThread and Commit of thread
// "block" wait until release is closed, and which records the deadline of
// each call's context.
type blockingDriver struct {
	driver.Driver
	entered  chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	deadline time.Time
	hasDL    bool
}

func (d *blockingDriver) wait(ctx context.Context, thread string) {
	d.mu.Lock()
	d.deadline, d.hasDL = ctx.Deadline()
	d.mu.Unlock()
	if thread == "block" {
		d.entered <- struct{}{}
		<-d.release
	}
}

func (d *blockingDriver) LoadThread(ctx context.Context, id string) (driver.ThreadSnapshot, error) {
	d.wait(ctx, id)
	return d.Driver.LoadThread(ctx, id)
}

func (d *blockingDriver) Commit(ctx context.Context, b driver.Batch) (int64, error) {
	d.wait(ctx, b.ThreadID)
	return d.Driver.Commit(ctx, b)
}

func newBlocking() (*blockingDriver, storedriver.Factory) {
	d := &blockingDriver{Driver: memdriver.New(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	return d, storedriver.FactoryFunc(func(context.Context, map[string]string) (driver.Driver, error) { return d, nil })
}

// TestDirectContext: the call's deadline reaches the driver's context; a
// call whose context ends returns at once, its connection abandoned.
func TestDirectContext(t *testing.T) {
	d, f := newBlocking()
	c, _ := connectDirect(t, f)
	ctx := context.Background()
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	_, err := c.LoadThread(dctx, "t")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	dl, has := d.deadline, d.hasDL
	d.mu.Unlock()
	if !has || time.Until(dl) < 50*time.Minute || time.Until(dl) > time.Hour {
		t.Fatalf("the driver's context has deadline %v (%v), want about an hour from now", dl, has)
	}
	if _, err := c.LoadThread(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	has = d.hasDL
	d.mu.Unlock()
	if has {
		t.Fatal("a call without a deadline reached the driver with one")
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.LoadThread(cctx, "block")
		done <- err
	}()
	<-d.entered
	open, _ := driverrpc.DirectOpen(c)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled call: %v, want context.Canceled", err)
	}
	if after, _ := driverrpc.DirectOpen(c); after != open-1 {
		t.Fatalf("%d connections open after the canceled call, want %d: its connection closed", after, open-1)
	}
	close(d.release)
	if _, err := c.LoadThread(ctx, "t"); err != nil {
		t.Fatalf("a call after the canceled one: %v", err)
	}
}

// TestDirectDriverGone: a call whose connection breaks fails with
// ErrUnavailable, a commit's outcome then unknown; once the socket is gone,
// calls go over gRPC.
func TestDirectDriverGone(t *testing.T) {
	d, f := newBlocking()
	c, l := connectDirect(t, f)
	ctx := context.Background()
	if err := c.Open(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b := storedrivertest.NewBuilder("block")
	r := b.Run("r")
	done := make(chan error, 1)
	go func() {
		_, err := c.Commit(ctx, b.Batch([]string{r.ID}, []record.Run{r}, []record.Message{b.Msg("m", r.ID)}, nil))
		done <- err
	}()
	<-d.entered
	served := driverrpc.DirectServed(l)
	_ = l.Close() // the driver's end of every connection closes
	err := <-done
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("a commit whose connection broke: %v, want ErrUnavailable (outcome unknown)", err)
	}
	close(d.release)
	// The commit ran after all: it was only its reply that was lost.
	eventually(t, "the commit applied", func() bool {
		snap, err := d.Driver.LoadThread(ctx, "block")
		return err == nil && snap.Thread.Version == 1
	})
	if _, err := c.LoadThread(ctx, "t"); err != nil {
		t.Fatalf("a call once the socket is gone: %v, want it answered over gRPC", err)
	}
	if driverrpc.DirectServed(l) != served {
		t.Fatal("a call went over the closed direct transport")
	}
}

// TestRemoveDirectSocket: the host removes the socket a killed driver
// left, and its directory.
func TestRemoveDirectSocket(t *testing.T) {
	c, l := connectDirect(t, memFactory)
	c.Disconnect()
	c.RemoveDirectSocket()
	for _, p := range []string{l.Path(), strings.TrimSuffix(l.Path(), "/store.sock")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after RemoveDirectSocket: %v, want it removed", p, err)
		}
	}
}
