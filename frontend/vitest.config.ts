import { defineConfig } from 'vitest/config'
import vue from '@vitejs/plugin-vue'

// Unit and component tests: src/**/*.test.ts in happy-dom.
export default defineConfig({
  plugins: [vue()],
  test: {
    environment: 'happy-dom',
    include: ['src/**/*.test.ts'],
  },
})
