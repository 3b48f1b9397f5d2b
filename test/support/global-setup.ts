import type { TestProject } from "vitest/node";
import { closedPort, startOrigin } from "./origin.ts";
import { captureRuntimeReports } from "./runtime-reports.ts";

/**
 * Starts the real origin the Worker proxies to, and finds a port where no
 * origin answers. Keeps workerd's own reports of exceptions for the tests
 * that cause them to claim; one that none claimed fails the run.
 */
export default async function setup(project: TestProject) {
  const reports = captureRuntimeReports();
  const { server, port } = await startOrigin(0, reports.serve);
  project.provide("originPort", port);
  project.provide("downPort", await closedPort());
  return async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const unclaimed = reports.stop();
    if (unclaimed.length > 0) {
      process.stderr.write(unclaimed.join(""));
      throw new Error(
        `${unclaimed.length} report(s) of the runtime above were claimed by no test: a test that causes one claims it with expectRuntimeReports()`,
      );
    }
  };
}
