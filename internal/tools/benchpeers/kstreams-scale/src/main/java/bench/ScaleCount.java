package bench;

import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

import sun.misc.Signal;
import sun.misc.SignalHandler;

/**
 * Kafka Streams 4.1.1 peer of {@code kstate bench scale} (issue #27's pause benchmark): the same
 * workload as kstate's worker (cmd/kstate/bench_scale_worker.go, fatCount), as one instance.
 *
 * <p>Input: key "k%06d", value of at least 16 bytes (the producer's send time in unix ns,
 * big-endian, then a number and padding). State: a RocksDB key-value store (changelogged) whose
 * value is the key's count (8 bytes, big-endian) and state-bytes - 8 bytes of random padding,
 * rewritten on every record. Output: the same key, 16 bytes: the count and the input's send time.
 * exactly_once_v2.
 *
 * <p>Stdout carries one JSON status line every 100 ms, in the shape of kstate's worker lines
 * ({"at_ns":..,"status":{"state":..,"partitions":[..],"total":{..}}}: the subset of kstate.Status
 * the benchmark reads): the active tasks' partitions, whether each restores and what its last
 * restore read, plus the standby tasks. SIGTERM closes the instance leaving the group and exits 0.
 *
 * <p>Arguments are --name=value; see {@link #usage()}.
 */
public final class ScaleCount {

    static final String STORE = "v";

    /** Per partition: restoring, and the records and time of its last restore. */
    static final class Restore {
        volatile boolean restoring;
        final AtomicLong records = new AtomicLong();
        volatile long startNs;
        volatile long timeNs;
    }

    static final Map<Integer, Restore> RESTORES = new ConcurrentHashMap<>();
    static final AtomicLong RESTORED_TOTAL = new AtomicLong();
    static final AtomicInteger REBALANCES = new AtomicInteger();

    static Restore restore(final TopicPartition tp) {
        return RESTORES.computeIfAbsent(tp.partition(), p -> new Restore());
    }

    /** The fat count: one instance per task (input partition). */
    static final class FatCount implements Processor<byte[], byte[], byte[], byte[]> {
        private final int size;
        private final SplittableRandom rng = new SplittableRandom(System.nanoTime());
        private ProcessorContext<byte[], byte[]> context;
        private KeyValueStore<Bytes, byte[]> store;

        FatCount(final int size) {
            this.size = Math.max(size, 8);
        }

        @Override
        public void init(final ProcessorContext<byte[], byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(final Record<byte[], byte[]> record) {
            final Bytes key = Bytes.wrap(record.key());
            final byte[] old = store.get(key);
            final long n = (old != null && old.length >= 8 ? ByteBuffer.wrap(old).getLong() : 0L) + 1L;
            final byte[] v = new byte[size];
            rng.nextBytes(v);
            ByteBuffer.wrap(v).putLong(n);
            store.put(key, v);
            final ByteBuffer out = ByteBuffer.allocate(16);
            out.putLong(n);
            final byte[] in = record.value();
            out.putLong(in != null && in.length >= 8 ? ByteBuffer.wrap(in).getLong() : 0L);
            context.forward(record.withValue(out.array()));
        }
    }

    static void usage() {
        System.err.println(String.join("\n",
            "usage: java -jar kstreams-scale.jar --name=value ...",
            "  --brokers=HOST:PORT[,..]      bootstrap servers",
            "  --app-id=ID --in=T --out=T    application.id, input and output topics",
            "  --state-dir=DIR               state.dir of this instance",
            "  --instance=NAME               client.id (in logs)",
            "  --state-bytes=N               bytes of every key's state value (default 512)",
            "  --standbys=N                  num.standby.replicas (default 0)",
            "  --session-timeout-ms=MS       the consumer's session.timeout.ms (default 10000, kstate's)",
            "  --heartbeat-ms=MS             heartbeat.interval.ms (default session timeout / 3, kstate's)",
            "  --commit-ms=MS                commit.interval.ms (default 200: kstate's Batching.MaxWait)",
            "  --acceptable-lag=N            acceptable.recovery.lag (default 10000, kstate's Group.AcceptableLag)",
            "  --probing-ms=MS               probing.rebalance.interval.ms (default 600000; at least 60000)",
            "  --leave=true|false            leave the group on close (default true)",
            "  --status-ms=MS                status line interval (default 100)",
            "  --X.some.config=value         any other StreamsConfig/client property, verbatim"));
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
                System.err.println("kstreams-scale: bad argument " + arg + " (want --name=value)");
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
        for (final String req : new String[] {"brokers", "app-id", "in", "out", "state-dir"}) {
            if (!a.containsKey(req)) {
                System.err.println("kstreams-scale: --" + req + " is required");
                usage();
                System.exit(2);
            }
        }
        final int stateBytes = Integer.parseInt(a.getOrDefault("state-bytes", "512"));
        final long session = Long.parseLong(a.getOrDefault("session-timeout-ms", "10000"));
        final boolean leave = Boolean.parseBoolean(a.getOrDefault("leave", "true"));
        final long statusMs = Long.parseLong(a.getOrDefault("status-ms", "100"));

        final Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("app-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("brokers"));
        p.put(StreamsConfig.CLIENT_ID_CONFIG, a.getOrDefault("instance", a.get("app-id")));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, -1);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(a.getOrDefault("commit-ms", "200")));
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.parseInt(a.getOrDefault("standbys", "0")));
        p.put(StreamsConfig.ACCEPTABLE_RECOVERY_LAG_CONFIG, Long.parseLong(a.getOrDefault("acceptable-lag", "10000")));
        if (a.containsKey("probing-ms")) {
            p.put(StreamsConfig.PROBING_REBALANCE_INTERVAL_MS_CONFIG, Long.parseLong(a.get("probing-ms")));
        }
        p.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), (int) session);
        p.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
            Integer.parseInt(a.getOrDefault("heartbeat-ms", Long.toString(Math.min(session / 3, 3000)))));
        // A dynamic member's consumer does not send LeaveGroup on close unless told to:
        // Kafka Streams sets internal.leave.group.on.close=false by default, and
        // CloseOptions.leaveGroup(true) only removes static members (group.instance.id).
        p.put(StreamsConfig.mainConsumerPrefix("internal.leave.group.on.close"), leave);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), "none");
        p.putAll(extra);

        final Topology topology = new Topology();
        topology.addSource("source", Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(), a.get("in"));
        topology.addProcessor("count", () -> new FatCount(stateBytes), "source");
        topology.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.Bytes(),
            Serdes.ByteArray()).withCachingDisabled(), "count");
        topology.addSink("sink", a.get("out"), Serdes.ByteArray().serializer(), Serdes.ByteArray().serializer(), "count");

        final KafkaStreams streams = new KafkaStreams(topology, p);
        final CountDownLatch done = new CountDownLatch(1);
        final AtomicInteger exitCode = new AtomicInteger(0);
        streams.setStateListener((newState, oldState) -> {
            System.err.println("kstreams-scale: state " + oldState + " -> " + newState);
            if (newState == KafkaStreams.State.REBALANCING) {
                REBALANCES.incrementAndGet();
            }
            if (newState == KafkaStreams.State.ERROR) {
                exitCode.set(1);
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("kstreams-scale: uncaught exception: " + e);
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(final TopicPartition tp, final String store, final long start, final long end) {
                final Restore r = restore(tp);
                r.records.set(0);
                r.timeNs = 0;
                r.startNs = System.nanoTime();
                r.restoring = true;
            }

            @Override
            public void onBatchRestored(final TopicPartition tp, final String store, final long end, final long n) {
                restore(tp).records.addAndGet(n);
                RESTORED_TOTAL.addAndGet(n);
            }

            @Override
            public void onRestoreEnd(final TopicPartition tp, final String store, final long total) {
                final Restore r = restore(tp);
                r.timeNs = System.nanoTime() - r.startNs;
                r.restoring = false;
            }

            @Override
            public void onRestoreSuspended(final TopicPartition tp, final String store, final long total) {
                final Restore r = restore(tp);
                r.timeNs = System.nanoTime() - r.startNs;
                r.restoring = false;
            }
        });

        final PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false,
            StandardCharsets.UTF_8);
        final Object outLock = new Object();
        final Thread status = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(statusMs);
                } catch (InterruptedException ie) {
                    return;
                }
                final String line = statusLine(streams);
                synchronized (outLock) {
                    out.println(line);
                    out.flush();
                }
            }
        }, "status");
        status.setDaemon(true);

        final Runnable stop = () -> {
            final KafkaStreams.CloseOptions opts = new KafkaStreams.CloseOptions().timeout(Duration.ofSeconds(30)).leaveGroup(leave);
            final boolean closed = streams.close(opts);
            status.interrupt();
            synchronized (outLock) {
                out.println("{\"at_ns\":" + nowNs() + ",\"stopped\":true" + (closed ? "" : ",\"err\":\"close timed out\"") + "}");
                out.flush();
            }
            System.err.println("kstreams-scale: closed (" + (closed ? "clean" : "timed out") + ")");
            System.exit(closed ? exitCode.get() : 1);
        };
        final SignalHandler onSignal = sig -> new Thread(stop, "stop").start();
        Signal.handle(new Signal("TERM"), onSignal);
        Signal.handle(new Signal("INT"), onSignal);

        System.err.println("kstreams-scale: " + a + " " + extra);
        streams.start();
        status.start();
        done.await();
        streams.close(Duration.ofSeconds(10));
        System.exit(exitCode.get());
    }

    static long nowNs() {
        final java.time.Instant t = java.time.Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    /** One status line: the fields of kstate.Status that `kstate bench scale` reads. */
    static String statusLine(final KafkaStreams streams) {
        final KafkaStreams.State st = streams.state();
        final TreeSet<Integer> active = new TreeSet<>();
        final TreeSet<Integer> standby = new TreeSet<>();
        try {
            for (final ThreadMetadata t : streams.metadataForLocalThreads()) {
                for (final TaskMetadata task : t.activeTasks()) {
                    active.add(task.taskId().partition());
                }
                for (final TaskMetadata task : t.standbyTasks()) {
                    standby.add(task.taskId().partition());
                }
            }
        } catch (RuntimeException e) {
            // not running (yet, or any more): no tasks
        }
        final StringBuilder b = new StringBuilder(256);
        b.append("{\"at_ns\":").append(nowNs()).append(",\"status\":{\"state\":\"");
        b.append(st == KafkaStreams.State.RUNNING ? "Running" : st.name()).append("\",\"partitions\":[");
        final TreeMap<Integer, Restore> rs = new TreeMap<>(RESTORES);
        boolean first = true;
        for (final int part : active) {
            final Restore r = rs.get(part);
            if (!first) {
                b.append(',');
            }
            first = false;
            b.append("{\"partition\":").append(part).append(",\"restoring\":").append(r != null && r.restoring);
            if (r != null) {
                final long t = r.restoring ? System.nanoTime() - r.startNs : r.timeNs;
                b.append(",\"restored_records\":").append(r.records.get());
                b.append(",\"counters\":{\"RestoreRecords\":").append(r.records.get()).append(",\"RestoreTime\":").append(t).append('}');
            }
            b.append('}');
        }
        b.append("],\"total\":{\"RestoreRecords\":").append(RESTORED_TOTAL.get()).append("},\"kstreams\":{\"standby\":");
        b.append(standby.toString().replace(" ", "")).append(",\"rebalances\":").append(REBALANCES.get()).append("}}}");
        return b.toString();
    }
}
