import type { TestProject } from "vitest/node";
import { closedPort, startOrigin } from "./origin.ts";

/** Starts the real origin the Worker proxies to, and finds a port where no origin answers. */
export default async function setup(project: TestProject) {
  const { server, port } = await startOrigin();
  project.provide("originPort", port);
  project.provide("downPort", await closedPort());
  return () => new Promise<void>((resolve) => server.close(() => resolve()));
}
