package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the shared store of the counters: one Redis (or Valkey) every gateway replica
// uses. Each counter is one integer key, named after its tenant, scope, kind and window start,
// that expires an hour after its window ends. Every change is a Lua script, so a reservation
// over several counters is atomic: what one replica is granted no other replica is.
type Redis struct {
	c *redis.Client
}

// RedisOptions say where the store is.
type RedisOptions struct {
	// Addr is host:port.
	Addr string
	// Password, when the server wants one (read from a file or the environment by the
	// caller, never a flag value).
	Password string
	// DialTimeout and IOTimeout bound one call (defaults 200 ms and 100 ms): the check path
	// never waits longer than that for the store.
	DialTimeout, IOTimeout time.Duration
}

// quietRedis routes go-redis's own log lines (pool dial failures, printed on stderr by
// default) to slog at debug level: the limiter logs the store's outages itself, once.
type quietRedis struct{}

func (quietRedis) Printf(_ context.Context, format string, v ...any) {
	slog.Debug("redis client: " + fmt.Sprintf(format, v...))
}

var setRedisLogger sync.Once

// NewRedis returns a client of the store; it connects on first use.
func NewRedis(o RedisOptions) (*Redis, error) {
	setRedisLogger.Do(func() { redis.SetLogger(quietRedis{}) })
	if o.Addr == "" {
		return nil, errors.New("the limits store needs an address (host:port)")
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 200 * time.Millisecond
	}
	if o.IOTimeout <= 0 {
		o.IOTimeout = 100 * time.Millisecond
	}
	c := redis.NewClient(&redis.Options{
		Addr: o.Addr, Password: o.Password,
		DialTimeout: o.DialTimeout, ReadTimeout: o.IOTimeout, WriteTimeout: o.IOTimeout,
		// A down store must not hold the check: no retries, fail fast, reconnect in the
		// background loop's ping.
		MaxRetries: -1, PoolTimeout: o.IOTimeout, ContextTimeoutEnabled: true,
		DisableIdentity: true, Protocol: 2,
	})
	return &Redis{c: c}, nil
}

// Close closes the client's connections.
func (r *Redis) Close() error { return r.c.Close() }

// Ping reports whether the store answers.
func (r *Redis) Ping(ctx context.Context) error { return r.c.Ping(ctx).Err() }

// reserveScript grants units of request counters and reads token counters, all or nothing:
// per key, ARGV holds cap (0: no hard cap), want (units wanted; 0: read only) and the key's
// time to live in ms. If any counter that wants units, or any capped read-only counter, is
// already at its cap, nothing is granted anywhere. The reply is, per key, the units granted
// and the counter's value after the grant.
var reserveScript = redis.NewScript(`
local cur, refuse = {}, false
for i = 1, #KEYS do
  local c = tonumber(redis.call('GET', KEYS[i]) or '0')
  cur[i] = c
  local cap = tonumber(ARGV[3*i-2])
  if cap > 0 and c >= cap then refuse = true end
end
local out = {}
for i = 1, #KEYS do
  local cap, want, ttl = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local g = 0
  if not refuse and want > 0 then
    g = want
    if cap > 0 and cur[i] + g > cap then g = cap - cur[i] end
    cur[i] = redis.call('INCRBY', KEYS[i], g)
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
  out[2*i-1] = g
  out[2*i] = cur[i]
end
return out
`)

// pushScript adds what a replica counted to counters and reads them back. KEYS[1] is the
// pushing replica's guard and ARGV[1] the push's number: a push whose number is not above the
// guard's was applied already (its answer was lost to a timeout, and the replica sends it
// again), so it only reads. Then per key ARGV holds a floor, a delta and the time to live in
// ms; the counter becomes max(value, floor) + delta. The floor is the replica's last view of
// the count and is only sent after the store was unreachable: a Redis that restarted empty
// gets the counts back from the replicas' memory.
var pushScript = redis.NewScript(`
local seq = tonumber(ARGV[1])
local apply = seq > tonumber(redis.call('GET', KEYS[1]) or '0')
if apply then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
local out = {}
for i = 2, #KEYS do
  local j = 3*(i-1)
  local floor, delta, ttl = tonumber(ARGV[j]), tonumber(ARGV[j+1]), tonumber(ARGV[j+2])
  local c = tonumber(redis.call('GET', KEYS[i]) or '0')
  local v = c
  if apply then
    if floor > v then v = floor end
    v = v + delta
    if v ~= c then redis.call('SET', KEYS[i], v, 'PX', ttl) end
  end
  out[i-1] = v
end
return out
`)

// Op is one counter in a call to the store.
type Op struct {
	Key string
	// Reserve: Cap (0: none) and Want; Push: Floor and Delta.
	Cap, Want    int64
	Floor, Delta int64
	TTL          time.Duration
}

func args(ops []Op, a, b func(Op) int64) (keys []string, argv []any) {
	keys = make([]string, len(ops))
	argv = make([]any, 0, 3*len(ops))
	for i, o := range ops {
		keys[i] = o.Key
		ttl := o.TTL.Milliseconds()
		if ttl < 1000 {
			ttl = 1000
		}
		argv = append(argv, a(o), b(o), ttl)
	}
	return keys, argv
}

// Reserve runs reserveScript over ops; granted and values are filled per op.
func (r *Redis) Reserve(ctx context.Context, ops []Op, granted, values []int64) error {
	keys, argv := args(ops, func(o Op) int64 { return o.Cap }, func(o Op) int64 { return o.Want })
	res, err := reserveScript.Run(ctx, r.c, keys, argv...).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) != 2*len(ops) {
		return fmt.Errorf("reserve: %d values for %d counters", len(res), len(ops))
	}
	for i := range ops {
		granted[i], values[i] = res[2*i], res[2*i+1]
	}
	return nil
}

// pushBatch bounds one script call: Redis runs a script alone, so a long one would hold every
// other replica's reservations.
const pushBatch = 256

// guardTTL is how long the store remembers a replica's last push: a push that failed is sent
// again at the next flush, far sooner.
const guardTTL = 24 * time.Hour

// PushID names one push: the replica that sends it (random, one per limiter) and its number,
// growing with each push. A push sent again after an error keeps its number and says Again,
// so the store applies it once even when the first attempt reached it and only its answer was
// lost.
type PushID struct {
	Replica string
	Seq     int64
	Again   bool
}

// Push adds ops' deltas to their counters and reads them back, in batches; values are filled
// per op. Batch i of push seq carries the number seq<<20 + i and records it in the replica's
// guard in the same transaction, so a push sent again after its first batches landed applies
// only the rest. A first attempt without floors (the store did not go away: nearly every push)
// is a MULTI of INCRBYs; one sent again, or with floors, is pushScript, which reads the guard.
func (r *Redis) Push(ctx context.Context, id PushID, ops []Op, values []int64) error {
	floors := false
	for _, o := range ops {
		floors = floors || o.Floor > 0
	}
	guard := "ipl:push:" + id.Replica
	for from := 0; from < len(ops); from += pushBatch {
		to := min(len(ops), from+pushBatch)
		seq := id.Seq<<20 + int64(from/pushBatch)
		var err error
		if floors || id.Again {
			err = r.pushChecked(ctx, guard, seq, ops[from:to], values[from:to])
		} else {
			err = r.incr(ctx, guard, seq, ops[from:to], values[from:to])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *Redis) pushChecked(ctx context.Context, guard string, seq int64, ops []Op, values []int64) error {
	keys, argv := args(ops, func(o Op) int64 { return o.Floor }, func(o Op) int64 { return o.Delta })
	keys = append([]string{guard}, keys...)
	argv = append([]any{seq, guardTTL.Milliseconds()}, argv...)
	res, err := pushScript.Run(ctx, r.c, keys, argv...).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) != len(ops) {
		return fmt.Errorf("push: %d values for %d counters", len(res), len(ops))
	}
	copy(values, res)
	return nil
}

func (r *Redis) incr(ctx context.Context, guard string, seq int64, ops []Op, values []int64) error {
	incrs := make([]*redis.IntCmd, len(ops))
	gets := make([]*redis.StringCmd, len(ops))
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, o := range ops {
			if o.Delta == 0 { // a read: INCRBY 0 would create a counter without an expiry
				gets[i] = p.Get(ctx, o.Key)
				continue
			}
			incrs[i] = p.IncrBy(ctx, o.Key, o.Delta)
			p.PExpire(ctx, o.Key, max(o.TTL, time.Second))
		}
		p.Set(ctx, guard, seq, guardTTL)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i := range ops {
		if incrs[i] != nil {
			values[i] = incrs[i].Val()
		} else {
			values[i], _ = strconv.ParseInt(gets[i].Val(), 10, 64)
		}
	}
	return nil
}

// Get reads counters (0 for a missing one).
func (r *Redis) Get(ctx context.Context, keys []string) ([]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	vals, err := r.c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out, nil
}

// counterKey names a counter: the tenant in braces (a Redis Cluster hash tag, so one request's
// counters share a slot), the scope ("t" for the tenant, "k:<id>" for a key), the kind and the
// window's start in Unix seconds.
func counterKey(tenant, keyID string, k Kind, start time.Time) string {
	b := make([]byte, 0, 64)
	b = append(b, "ipl:{"...)
	b = append(b, tenant...)
	b = append(b, "}:"...)
	if keyID == "" {
		b = append(b, 't')
	} else {
		b = append(b, "k:"...)
		b = append(b, keyID...)
	}
	b = append(b, ':')
	b = append(b, kindShort[k]...)
	b = append(b, ':')
	b = strconv.AppendInt(b, start.Unix(), 10)
	return string(b)
}
