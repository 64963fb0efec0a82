package bench;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * Kafka Streams peer of kstate's "heavy" benchmark workload (Processor API).
 *
 * <p>Per key it keeps what kstate's heavy processor keeps (cmd/kstate-count -processor heavy):
 * <ul>
 *   <li>a list of the key's last 5 values: store "recent", key -> up to 5 big-endian longs
 *       (8 bytes each, oldest first), rewritten on every record;</li>
 *   <li>a map of 4 aggregates (count, sum, min, max): store "agg", key -> 4 big-endian longs
 *       (32 bytes). One value for the four entries is the cheapest encoding Kafka Streams has for
 *       a small fixed map (kstate and Flink keep 4 map entries);</li>
 *   <li>one processing-time timer per key, moved on every record to now + 1 h. Kafka Streams has no
 *       per-key timers; the closest is a timer index: store "timers", key = deadline (8 bytes
 *       big-endian) + key, so that its byte order is deadline order, and store "timer-of", key ->
 *       its current deadline, to find the entry to delete when the timer moves. A wall-clock
 *       punctuator (every second, per task) scans "timers" up to now; a due timer clears the key's
 *       list, map and timer and emits nothing. At now + 1 h no timer is due during a run.</li>
 * </ul>
 * A record's value is its first 8 bytes (the producer's send time, a long). For every input
 * record it forwards (key, count as 8-byte big-endian long + the input's 8-byte send time), the
 * harness's "stateful count" output, so the harness verifies it like count. All four stores are
 * RocksDB key-value stores with changelogs; the record cache is off unless --cache-bytes > 0.
 *
 * <p>Arguments are --name=value; see {@link #usage()}.
 */
public final class KStreamsHeavy {

    static final String RECENT = "recent";
    static final String AGG = "agg";
    static final String TIMERS = "timers";
    static final String TIMER_OF = "timer-of";
    /** The list's length: the key's last HISTORY values. */
    static final int HISTORY = 5;
    /** A timer is set this far ahead of the processing time of the key's last record. */
    static final long IDLE_MS = 3_600_000L;
    /** How often the punctuator looks for due timers. */
    static final Duration PUNCTUATE_EVERY = Duration.ofSeconds(1);
    static final byte[] PRESENT = new byte[0];
    static final AtomicLong PROCESSED = new AtomicLong();
    static final AtomicLong FIRED = new AtomicLong();

    /** The processor: one instance per task (input partition). */
    static final class HeavyProcessor implements Processor<byte[], byte[], byte[], byte[]> {
        private ProcessorContext<byte[], byte[]> context;
        private KeyValueStore<Bytes, byte[]> recent;
        private KeyValueStore<Bytes, byte[]> agg;
        private KeyValueStore<Bytes, byte[]> timers;
        private KeyValueStore<Bytes, byte[]> timerOf;

        @Override
        public void init(final ProcessorContext<byte[], byte[]> context) {
            this.context = context;
            this.recent = context.getStateStore(RECENT);
            this.agg = context.getStateStore(AGG);
            this.timers = context.getStateStore(TIMERS);
            this.timerOf = context.getStateStore(TIMER_OF);
            context.schedule(PUNCTUATE_EVERY, PunctuationType.WALL_CLOCK_TIME, this::fireDue);
        }

        @Override
        public void process(final Record<byte[], byte[]> record) {
            final Bytes key = Bytes.wrap(record.key());
            final byte[] in = record.value();
            final long v = in != null && in.length >= 8 ? ByteBuffer.wrap(in, 0, 8).getLong() : 0L;

            // the map: count, sum, min, max
            long count = 0, sum = 0, lo = Long.MAX_VALUE, hi = Long.MIN_VALUE;
            final byte[] a = agg.get(key);
            if (a != null) {
                final ByteBuffer b = ByteBuffer.wrap(a);
                count = b.getLong();
                sum = b.getLong();
                lo = b.getLong();
                hi = b.getLong();
            }
            count++;
            sum += v;
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
            agg.put(key, ByteBuffer.allocate(32).putLong(count).putLong(sum).putLong(lo).putLong(hi).array());

            // the list: the last HISTORY values, oldest first
            final byte[] old = recent.get(key);
            final int kept = old == null ? 0 : Math.min(old.length, (HISTORY - 1) * 8);
            final byte[] list = new byte[kept + 8];
            if (kept > 0) {
                System.arraycopy(old, old.length - kept, list, 0, kept);
            }
            ByteBuffer.wrap(list, kept, 8).putLong(v);
            recent.put(key, list);

            // the timer: delete the key's timer, set it to now + IDLE_MS
            final byte[] prev = timerOf.get(key);
            if (prev != null) {
                timers.delete(timerKey(ByteBuffer.wrap(prev).getLong(), record.key()));
            }
            final long deadline = context.currentSystemTimeMs() + IDLE_MS;
            timers.put(timerKey(deadline, record.key()), PRESENT);
            timerOf.put(key, ByteBuffer.allocate(8).putLong(deadline).array());

            final ByteBuffer out = ByteBuffer.allocate(16); // big-endian by default
            out.putLong(count);
            if (in != null && in.length >= 8) {
                out.put(in, 0, 8);
            }
            context.forward(record.withValue(out.array()));
            PROCESSED.incrementAndGet();
        }

        /** The punctuator: every timer due at now fires: the key's state is cleared, nothing is emitted. */
        private void fireDue(final long now) {
            final List<Bytes> due = new ArrayList<>();
            // keys are deadline (8 bytes) + key; every key of a deadline <= now sorts below the 8 bytes of now + 1
            try (KeyValueIterator<Bytes, byte[]> it = timers.range(Bytes.wrap(new byte[8]),
                    Bytes.wrap(ByteBuffer.allocate(8).putLong(now + 1).array()))) {
                while (it.hasNext()) {
                    final KeyValue<Bytes, byte[]> e = it.next();
                    due.add(e.key);
                }
            }
            for (final Bytes t : due) {
                final byte[] tk = t.get();
                final Bytes key = Bytes.wrap(Arrays.copyOfRange(tk, 8, tk.length));
                timers.delete(t);
                timerOf.delete(key);
                recent.delete(key);
                agg.delete(key);
                FIRED.incrementAndGet();
            }
        }
    }

    static Bytes timerKey(final long deadline, final byte[] key) {
        return Bytes.wrap(ByteBuffer.allocate(8 + key.length).putLong(deadline).put(key).array());
    }

    static void usage() {
        System.err.println(String.join("\n",
            "usage: java -jar kstreams-heavy.jar [--name=value ...]",
            "  the heavy workload: per key a list of the last 5 values, a map of count/sum/min/max and a",
            "  processing-time timer at now + 1 h moved on every record (a punctuator over a timer index store);",
            "  per input record the harness's 16-byte output (count + the input's send time)",
            "  --brokers=HOST:PORT[,..]   bootstrap servers (default $BROKERS or 127.0.0.1:9092)",
            "  --app-id=ID                application.id = consumer group = internal-topic prefix (default bench-kstreams-heavy)",
            "  --in=TOPIC --out=TOPIC     (default bench-in / bench-out)",
            "  --guarantee=G              exactly_once_v2 (default) | at_least_once",
            "  --commit-ms=MS             commit.interval.ms (default: Kafka Streams' own: 100 under EOS, 30000 under ALOS)",
            "  --threads=N                num.stream.threads (default 1)",
            "  --state-dir=DIR            state.dir (default /tmp/kstreams-heavy)",
            "  --cache-bytes=B            statestore.cache.max.bytes; > 0 also enables caching on the stores (default 0: no cache)",
            "  --rf=N                     replication.factor of internal topics (default -1: broker default)",
            "  --compression=C            producer compression.type (default none)",
            "  --workload=W               heavy (default) or big: count with a --value-bytes state value per key (BigCount)",
            "  --value-bytes=B            --workload=big: the state value's size (default 200, at least 16)",
            "  --X.some.config=value      any other StreamsConfig/client property, passed through verbatim"));
    }

    static StoreBuilder<KeyValueStore<Bytes, byte[]>> store(final String name, final boolean cache) {
        final StoreBuilder<KeyValueStore<Bytes, byte[]>> b =
            Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(name), Serdes.Bytes(), Serdes.ByteArray());
        return cache ? b.withCachingEnabled() : b.withCachingDisabled();
    }

    public static void main(final String[] argv) throws Exception {
        final Map<String, String> a = new HashMap<>();
        final Properties extra = new Properties();
        for (final String arg : argv) {
            if (arg.equals("--help") || arg.equals("-h")) {
                usage();
                return;
            }
            if (!arg.startsWith("--") || !arg.contains("=")) {
                System.err.println("bad argument: " + arg);
                usage();
                System.exit(2);
            }
            final String k = arg.substring(2, arg.indexOf('='));
            final String v = arg.substring(arg.indexOf('=') + 1);
            if (k.startsWith("X.")) {
                extra.put(k.substring(2), v);
            } else {
                a.put(k, v);
            }
        }
        final String envBrokers = System.getenv("BROKERS");
        final String brokers = a.getOrDefault("brokers", envBrokers != null && !envBrokers.isEmpty() ? envBrokers : "127.0.0.1:9092");
        final String appId = a.getOrDefault("app-id", "bench-kstreams-heavy");
        final String in = a.getOrDefault("in", "bench-in");
        final String out = a.getOrDefault("out", "bench-out");
        final String guarantee = a.getOrDefault("guarantee", StreamsConfig.EXACTLY_ONCE_V2);
        if (!guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2) && !guarantee.equals(StreamsConfig.AT_LEAST_ONCE)) {
            System.err.println("--guarantee must be " + StreamsConfig.EXACTLY_ONCE_V2 + " or " + StreamsConfig.AT_LEAST_ONCE);
            System.exit(2);
        }
        final long cacheBytes = Long.parseLong(a.getOrDefault("cache-bytes", "0"));

        final Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(a.getOrDefault("threads", "1")));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.getOrDefault("state-dir", "/tmp/kstreams-heavy"));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(a.getOrDefault("rf", "-1")));
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cacheBytes);
        if (a.containsKey("commit-ms")) {
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(a.get("commit-ms")));
        }
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), a.getOrDefault("compression", "none"));
        p.putAll(extra);

        final boolean cache = cacheBytes > 0;
        final Topology topology = new Topology();
        topology.addSource("source", Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(), in);
        final String workload = a.getOrDefault("workload", "heavy");
        if (workload.equals("big")) {
            final int valueBytes = Integer.parseInt(a.getOrDefault("value-bytes", "200"));
            if (valueBytes < 16) {
                System.err.println("--value-bytes must be at least 16");
                System.exit(2);
            }
            topology.addProcessor("heavy", () -> new BigCount(valueBytes), "source");
            topology.addStateStore(store(BigCount.STORE, cache), "heavy");
        } else if (workload.equals("heavy")) {
            topology.addProcessor("heavy", HeavyProcessor::new, "source");
            for (final String s : new String[] {RECENT, AGG, TIMERS, TIMER_OF}) {
                topology.addStateStore(store(s, cache), "heavy");
            }
        } else {
            System.err.println("--workload must be heavy or big");
            System.exit(2);
        }
        topology.addSink("sink", out, Serdes.ByteArray().serializer(), Serdes.ByteArray().serializer(), "heavy");

        final KafkaStreams streams = new KafkaStreams(topology, p);
        final CountDownLatch done = new CountDownLatch(1);
        final AtomicInteger exitCode = new AtomicInteger(0);
        streams.setStateListener((newState, oldState) -> {
            System.err.println("kstreams-heavy: state " + oldState + " -> " + newState);
            if (newState == KafkaStreams.State.ERROR) {
                exitCode.set(1);
                done.countDown();
            }
        });
        // One line per restored store partition: bench-peers.sh WORKLOAD=big times the restore of a
        // deleted state directory by them.
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(final TopicPartition tp, final String store, final long start, final long end) {}

            @Override
            public void onBatchRestored(final TopicPartition tp, final String store, final long end, final long n) {}

            @Override
            public void onRestoreEnd(final TopicPartition tp, final String store, final long n) {
                System.err.println("kstreams-heavy: restored " + store + " partition " + tp.partition() + ": " + n + " records");
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("kstreams-heavy: uncaught exception: " + e);
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.err.println("kstreams-heavy: stopped after " + PROCESSED.get() + " records, " + FIRED.get() + " timers fired");
            done.countDown();
        }, "shutdown"));

        final Thread progress = new Thread(() -> {
            long last = 0;
            while (true) {
                try {
                    Thread.sleep(5000);
                } catch (InterruptedException ie) {
                    return;
                }
                final long n = PROCESSED.get();
                System.err.printf("kstreams-heavy: %d processed (%.0f/s)%n", n, (n - last) / 5.0);
                last = n;
            }
        }, "progress");
        progress.setDaemon(true);
        progress.start();

        System.err.println("kstreams-heavy: workload=" + workload + " app-id=" + appId + " guarantee=" + guarantee + " threads="
            + p.get(StreamsConfig.NUM_STREAM_THREADS_CONFIG) + " commit.interval.ms="
            + p.getOrDefault(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "(default)") + " cache-bytes=" + cacheBytes
            + " timer=now+" + IDLE_MS + "ms punctuate=" + PUNCTUATE_EVERY.toMillis() + "ms " + in + " -> " + out);
        streams.start();
        done.await();
        if (exitCode.get() != 0) {
            streams.close(Duration.ofSeconds(10));
            System.exit(exitCode.get());
        }
    }
}
