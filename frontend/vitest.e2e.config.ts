import { defineConfig } from 'vitest/config'

// End-to-end: the built UI in Debian's Chromium (playwright-core) against `warden run all`
// and a simulated fleet, both started by e2e/global-setup.ts. One file at a time: they share
// the system.
export default defineConfig({
  test: {
    include: ['e2e/**/*.e2e.ts'],
    globalSetup: ['e2e/global-setup.ts'],
    fileParallelism: false,
    testTimeout: 90_000,
    hookTimeout: 180_000,
  },
})
