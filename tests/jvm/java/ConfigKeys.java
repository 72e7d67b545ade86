import java.util.List;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.ConfigDef;

/** Prints every topic and broker config key of the Kafka on the classpath, one tab-separated line each:
 *  scope, name, type, has-default, default (lists comma-joined), importance, internal. Read by
 *  scripts/gen_kafka_keys.py and tests/jvm/test_kafka_config_keys.py. */
public class ConfigKeys {
    static void dump(String scope, ConfigDef def) {
        for (ConfigDef.ConfigKey k : def.configKeys().values()) {
            Object d = k.hasDefault() ? k.defaultValue : null;
            String value = d instanceof List<?> l ? l.stream().map(String::valueOf).collect(Collectors.joining(","))
                    : String.valueOf(d);
            System.out.println(String.join("\t", scope, k.name, k.type.toString(), String.valueOf(k.hasDefault()),
                    value.replace("\t", " ").replace("\n", " "), k.importance.toString(), String.valueOf(k.internalConfig)));
        }
    }

    public static void main(String[] args) throws Exception {
        Class<?> logConfig = Class.forName("org.apache.kafka.storage.internals.log.LogConfig");
        dump("topic", (ConfigDef) logConfig.getMethod("configDefCopy").invoke(null));
        Class<?> kafkaConfig = Class.forName("kafka.server.KafkaConfig$");
        Object module = kafkaConfig.getField("MODULE$").get(null);
        dump("broker", (ConfigDef) kafkaConfig.getMethod("configDef").invoke(module));
    }
}
