/** This test file's own database (made by test/support/file-database.ts). */
export function databaseUrl(): string {
  const url = process.env.TEST_FILE_DATABASE_URL;
  if (!url) throw new Error('no test database: run integration tests through the integration project');
  return url;
}
