package bench;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetIdentifier;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacetProvider;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.TransactionNamingStrategy;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.state.rocksdb.RocksDBOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Apache Flink peer of kstate's "heavy" benchmark workload (DataStream API, embedded local MiniCluster).
 *
 * <p>KafkaSource (earliest, read_committed) -> keyBy(record key) -> a {@code KeyedProcessFunction}
 * on the RocksDB state backend (EmbeddedRocksDBStateBackend) keeping per key what kstate's heavy
 * processor keeps (cmd/kstate-count -processor heavy):
 * <ul>
 *   <li>{@code ListState<Long>} "recent": the key's last 5 values (appended while shorter, else
 *       replaced by the last 5);</li>
 *   <li>{@code MapState<String, Long>} "agg": 4 entries count, sum, min, max;</li>
 *   <li>one processing-time timer, moved on every record to now + 1 h (the old one deleted, its time
 *       kept in {@code ValueState<Long>} "timer", as Flink cannot list a key's timers; timers live in
 *       RocksDB, Flink's default for this backend). A firing timer clears the key's list, map and
 *       timer and emits nothing; at now + 1 h none fires during a run.</li>
 * </ul>
 * A record's value is its first 8 bytes (the producer's send time, a long). For every input record
 * the KafkaSink emits (key, count as 8-byte big-endian long + the input's 8-byte send time), the
 * harness's "stateful count" output, so the harness verifies it like count. Exactly-once output =
 * transactional KafkaSink committed when a checkpoint completes, so the checkpoint interval is the
 * commit cadence.
 *
 * <p>Arguments are --name=value; see {@link #usage()}.
 */
public final class FlinkHeavy {

    /** Records processed by the heavy function; same JVM as the MiniCluster, so a static works. */
    static final AtomicLong PROCESSED = new AtomicLong();

    /** Input record as the job sees it: the key (bytes as ISO-8859-1, a lossless 1:1 mapping) and
     *  the input value's first 8 bytes (the producer's send time) -- all the job needs, so the
     *  source -> keyBy exchange does not carry the rest of the value. */
    static final class InDeser implements KafkaRecordDeserializationSchema<Tuple2<String, Long>> {
        @Override
        public void deserialize(final ConsumerRecord<byte[], byte[]> r, final Collector<Tuple2<String, Long>> out) {
            final byte[] k = r.key();
            final byte[] v = r.value();
            final long ts = v != null && v.length >= 8 ? ByteBuffer.wrap(v, 0, 8).getLong() : 0L;
            out.collect(Tuple2.of(k == null ? "" : new String(k, StandardCharsets.ISO_8859_1), ts));
        }

        @Override
        public TypeInformation<Tuple2<String, Long>> getProducedType() {
            return Types.TUPLE(Types.STRING, Types.LONG);
        }
    }

    /** The list's length: the key's last HISTORY values. */
    static final int HISTORY = 5;
    /** A timer is set this far ahead of the processing time of the key's last record. */
    static final long IDLE_MS = 3_600_000L;
    static final String[] AGG_NAMES = {"count", "sum", "min", "max"};
    /** Timers that fired (none in a run shorter than IDLE_MS). */
    static final AtomicLong FIRED = new AtomicLong();

    /** The stateful step: list, map and timer per key (RocksDB), one output per input. */
    static final class Heavy extends KeyedProcessFunction<String, Tuple2<String, Long>, Tuple2<String, byte[]>> {
        private transient ListState<Long> recent;
        private transient MapState<String, Long> agg;
        private transient ValueState<Long> timer;
        private transient ArrayList<Long> list;

        @Override
        public void open(final OpenContext ctx) {
            recent = getRuntimeContext().getListState(new ListStateDescriptor<>("recent", Types.LONG));
            agg = getRuntimeContext().getMapState(new MapStateDescriptor<>("agg", Types.STRING, Types.LONG));
            timer = getRuntimeContext().getState(new ValueStateDescriptor<>("timer", Types.LONG));
            list = new ArrayList<>(HISTORY + 1);
        }

        @Override
        public void processElement(final Tuple2<String, Long> in, final Context ctx,
                                   final Collector<Tuple2<String, byte[]>> out) throws Exception {
            final long v = in.f1;
            final long[] a = new long[4];
            for (int i = 0; i < 4; i++) {
                final Long x = agg.get(AGG_NAMES[i]);
                a[i] = x != null ? x : i == 2 ? Long.MAX_VALUE : i == 3 ? Long.MIN_VALUE : 0L;
            }
            a[0]++;
            a[1] += v;
            a[2] = Math.min(a[2], v);
            a[3] = Math.max(a[3], v);

            list.clear();
            final Iterable<Long> old = recent.get();
            if (old != null) {
                for (final Long x : old) {
                    list.add(x);
                }
            }
            if (list.size() < HISTORY) {
                recent.add(v);
            } else {
                list.add(v);
                recent.update(list.subList(list.size() - HISTORY, list.size()));
            }
            for (int i = 0; i < 4; i++) {
                agg.put(AGG_NAMES[i], a[i]);
            }

            final Long prev = timer.value();
            if (prev != null) {
                ctx.timerService().deleteProcessingTimeTimer(prev);
            }
            final long deadline = ctx.timerService().currentProcessingTime() + IDLE_MS;
            ctx.timerService().registerProcessingTimeTimer(deadline);
            timer.update(deadline);

            final byte[] o = ByteBuffer.allocate(16).putLong(a[0]).putLong(v).array(); // big-endian
            out.collect(Tuple2.of(in.f0, o));
            PROCESSED.incrementAndGet();
        }

        @Override
        public void onTimer(final long timestamp, final OnTimerContext ctx,
                            final Collector<Tuple2<String, byte[]>> out) {
            recent.clear();
            agg.clear();
            timer.clear();
            FIRED.incrementAndGet();
        }
    }

    /** Output record -> ProducerRecord; partition left to the producer's default (murmur2 of the key).
     *  It names its topic (KafkaDatasetFacetProvider), which the POOLING naming strategy requires. */
    static final class OutSer implements KafkaRecordSerializationSchema<Tuple2<String, byte[]>>, KafkaDatasetFacetProvider {
        private final String topic;

        OutSer(final String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(final Tuple2<String, byte[]> e, final KafkaSinkContext ctx,
                                                        final Long timestamp) {
            return new ProducerRecord<>(topic, null, null, e.f0.getBytes(StandardCharsets.ISO_8859_1), e.f1);
        }

        @Override
        public Optional<KafkaDatasetFacet> getKafkaDatasetFacet() {
            return Optional.of(new DefaultKafkaDatasetFacet(DefaultKafkaDatasetIdentifier.ofTopics(List.of(topic))));
        }
    }

    static void usage() {
        System.err.println(String.join("\n",
            "usage: java -jar flink-heavy.jar [--name=value ...]",
            "  the heavy workload: per key a ListState of the last 5 values, a MapState of count/sum/min/max and",
            "  a processing-time timer at now + 1 h moved on every record; per input record the harness's",
            "  16-byte output (count + the input's send time)",
            "  --brokers=HOST:PORT[,..]   bootstrap servers (default $BROKERS or 127.0.0.1:9092)",
            "  --app-id=ID                consumer group id and default transactional-id prefix (default bench-flink)",
            "  --in=TOPIC --out=TOPIC     (default bench-in / bench-out)",
            "  --guarantee=G              exactly_once (default) | at_least_once   (KafkaSink DeliveryGuarantee)",
            "  --checkpoint-ms=MS         checkpoint interval = EOS commit cadence (default 100)",
            "  --parallelism=N            job parallelism = task slots of the local MiniCluster (default 1)",
            "  --state-dir=DIR            RocksDB local dir; checkpoints go to DIR/checkpoints, Flink tmp files to DIR/tmp",
            "                             (default $STATE_DIR or /tmp/flink-heavy)",
            "  --checkpoint-dir=URI       checkpoint storage (default file://<state-dir>/checkpoints)",
            "  --incremental=BOOL         RocksDB incremental checkpoints (default true)",
            "  --txn-prefix=P             KafkaSink transactional-id prefix (default: the app id, unique per run)",
            "  --txn-timeout-ms=MS        producer transaction.timeout.ms; must be <= the broker's",
            "                             transaction.max.timeout.ms (default 60000)",
            "  --txn-naming=S             KafkaSink TransactionNamingStrategy: INCREMENTING (connector default) | POOLING",
            "  --compression=C            producer compression.type (default none)",
            "  --consumer.K=V             any KafkaSource / consumer property, passed through verbatim",
            "  --producer.K=V             any KafkaSink / producer property, passed through verbatim",
            "  --C.K=V                    any Flink configuration option, e.g. --C.execution.buffer-timeout.interval=10ms"));
    }

    public static void main(final String[] argv) throws Exception {
        final Map<String, String> a = new HashMap<>();
        final Map<String, String> flinkConf = new HashMap<>();
        final Properties consumerProps = new Properties();
        final Properties producerProps = new Properties();
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
            if (k.startsWith("C.")) {
                flinkConf.put(k.substring(2), v);
            } else if (k.startsWith("consumer.")) {
                consumerProps.put(k.substring("consumer.".length()), v);
            } else if (k.startsWith("producer.")) {
                producerProps.put(k.substring("producer.".length()), v);
            } else {
                a.put(k, v);
            }
        }
        final String envBrokers = System.getenv("BROKERS");
        final String envState = System.getenv("STATE_DIR");
        final String brokers = a.getOrDefault("brokers", envBrokers != null && !envBrokers.isEmpty() ? envBrokers : "127.0.0.1:9092");
        final String appId = a.getOrDefault("app-id", "bench-flink-heavy");
        final String in = a.getOrDefault("in", "bench-in");
        final String out = a.getOrDefault("out", "bench-out");
        final String g = a.getOrDefault("guarantee", "exactly_once").toUpperCase(Locale.ROOT).replace('-', '_');
        final DeliveryGuarantee guarantee;
        if (g.equals("EXACTLY_ONCE")) {
            guarantee = DeliveryGuarantee.EXACTLY_ONCE;
        } else if (g.equals("AT_LEAST_ONCE")) {
            guarantee = DeliveryGuarantee.AT_LEAST_ONCE;
        } else {
            System.err.println("--guarantee must be exactly_once or at_least_once");
            System.exit(2);
            return;
        }
        final long checkpointMs = Long.parseLong(a.getOrDefault("checkpoint-ms", "100"));
        final int parallelism = Integer.parseInt(a.getOrDefault("parallelism", "1"));
        final File stateDir = new File(a.getOrDefault("state-dir", envState != null && !envState.isEmpty() ? envState : "/tmp/flink-heavy")).getAbsoluteFile();
        final String checkpointDir = a.getOrDefault("checkpoint-dir", new File(stateDir, "checkpoints").toURI().toString());
        final boolean incremental = Boolean.parseBoolean(a.getOrDefault("incremental", "true"));
        final String txnPrefix = a.getOrDefault("txn-prefix", appId);
        final String txnTimeoutMs = a.getOrDefault("txn-timeout-ms", "60000");
        final TransactionNamingStrategy naming =
            TransactionNamingStrategy.valueOf(a.getOrDefault("txn-naming", "INCREMENTING").toUpperCase(Locale.ROOT));
        final File rocksDir = new File(stateDir, "rocksdb");
        final File tmpDir = new File(stateDir, "tmp");
        rocksDir.mkdirs();
        tmpDir.mkdirs();

        // Everything Flink-side goes through the Configuration: Flink 2.x has no
        // env.setStateBackend(); state.backend.type=rocksdb instantiates EmbeddedRocksDBStateBackend.
        final Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(RocksDBOptions.LOCAL_DIRECTORIES, rocksDir.getPath());
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpointDir);
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, incremental);
        conf.set(CoreOptions.TMP_DIRS, tmpDir.getPath());
        conf.setString("web.tmpdir", tmpDir.getPath());
        // the MiniCluster's REST endpoint: loopback, any free port (runs may overlap)
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.setString("execution.checkpointing.interval", checkpointMs + " ms");
        conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        flinkConf.forEach(conf::setString);

        final StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);

        final KafkaSource<Tuple2<String, Long>> source = KafkaSource.<Tuple2<String, Long>>builder()
            .setBootstrapServers(brokers)
            .setTopics(in)
            .setGroupId(appId)
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setDeserializer(new InDeser())
            .setProperty(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed")
            .setProperties(consumerProps)
            .build();

        final Properties pp = new Properties();
        pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.getOrDefault("compression", "none"));
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, txnTimeoutMs);
        pp.putAll(producerProps);
        final KafkaSink<Tuple2<String, byte[]>> sink = KafkaSink.<Tuple2<String, byte[]>>builder()
            .setBootstrapServers(brokers)
            .setRecordSerializer(new OutSer(out))
            .setDeliveryGuarantee(guarantee)
            .setTransactionalIdPrefix(txnPrefix)
            .setTransactionNamingStrategy(naming)
            .setKafkaProducerConfig(pp)
            .build();

        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka-source")
            .keyBy(t -> t.f0, Types.STRING)
            .process(new Heavy(), Types.TUPLE(Types.STRING, Types.PRIMITIVE_ARRAY(Types.BYTE)))
            .name("heavy")
            .sinkTo(sink)
            .name("kafka-sink");

        System.err.println("flink-heavy: app-id=" + appId + " guarantee=" + guarantee + " parallelism=" + parallelism
            + " checkpoint.interval=" + checkpointMs + "ms incremental=" + incremental + " state.backend=rocksdb"
            + " txn-prefix=" + txnPrefix + " txn-naming=" + naming + " transaction.timeout.ms=" + txnTimeoutMs
            + " " + in + " -> " + out);
        final JobClient job = env.executeAsync("heavy " + appId);
        System.err.println("flink-heavy: job " + job.getJobID() + " submitted");

        final AtomicBoolean stopping = new AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            try {
                job.cancel().get(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("flink-heavy: cancel: " + e);
            }
            System.err.println("flink-heavy: stopped after " + PROCESSED.get() + " records, " + FIRED.get() + " timers fired");
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
                System.err.printf("flink-heavy: %d processed (%.0f/s)%n", n, (n - last) / 5.0);
                last = n;
            }
        }, "progress");
        progress.setDaemon(true);
        progress.start();

        try {
            job.getJobExecutionResult().get();
            System.err.println("flink-heavy: job finished");
        } catch (Exception e) {
            if (stopping.get()) {
                return;
            }
            System.err.println("flink-heavy: job failed: " + e);
            e.printStackTrace();
            System.exit(1);
        }
    }
}
