package imagetfrecords;

import java.util.List;
import org.apache.beam.sdk.util.construction.resources.PipelineResourcesDetector;

/**
 * Stages no jars with a job, for a cluster whose own class path holds Beam's runner.
 *
 * <p>Beam's job servers send every jar of their own class path with each job (the Flink job
 * server: 163 jars, 152 MB, uploaded to the JobManager and fetched by every TaskManager:
 * 13 of a sample run's 69 s here). A cluster with Beam's runner in its lib/ folder needs
 * none of them. pipeline/engines.py names this factory in the job's options
 * (pipelineResourcesDetectorFactoryClass) for --beam_runner_on_cluster.
 */
public final class NoJarsToStage implements PipelineResourcesDetector.Factory {

  /** Beam builds the factory named in the options through this method. */
  public static NoJarsToStage create() {
    return new NoJarsToStage();
  }

  @Override
  public PipelineResourcesDetector getPipelineResourcesDetector() {
    return classLoader -> List.of();
  }
}
